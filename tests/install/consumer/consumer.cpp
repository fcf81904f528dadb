// The same consumer compiled as C++17: the public header must work there, and
// the installed C++ binding must be found and compile.
// SPDX-License-Identifier: Apache-2.0
#include <rsp/rsp.hpp>

#include "consumer.c"
