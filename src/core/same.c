/*
 * The same-declaration caches (same.h): what is not inline.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "same.h"

#include <stdlib.h>

void rsp__same_free(rsp__same *m)
{
    free(m->fork_rids);
    free(m->fork_rid_recs);
    free(m->fpairs);
    free(m->fork_pair_recs);
    free(m->pc_slots);
    free(m->pc_has);
    free(m->pc_gens);
}
