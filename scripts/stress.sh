#!/usr/bin/env bash
# Build rsp-stress and run it for 20 s with 4 client and 4 partition threads
# (and its default two-rank, pipelined, mixed-batch and prefix-reuse modes:
# docs/stress.md; the pipelined mode keeps 2..4 steps in flight naming the
# same requests, docs/semantics.md 9.1; the prefix-reuse mode's two pools,
# one with demotion on).
# Extra arguments go to rsp-stress (they override the defaults here), e.g.
#   scripts/stress.sh --seconds 60 --seed 3 --json
# Exit status: rsp-stress's (0 only when every check passed).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rsp_ensure_deps
rsp_build build
exec "$RSP_ROOT/build/stress/rsp-stress" --seconds 20 --clients 4 --readers 4 "$@"
