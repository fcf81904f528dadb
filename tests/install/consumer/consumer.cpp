// The same consumer compiled as C++17: the public header must work there.
// SPDX-License-Identifier: Apache-2.0
#include "consumer.c"
