// Internal: the namespace of code compiled once per x86-64 level (the eager
// SIMD loops, ops/simd/loops.cpp, built for x86-64-v2, -v3 and -v4 and picked
// at run time). Compiled with KILN_SIMD_LEVEL=<level>, every inline function
// and template of math/expansions.h and math/simd_builder.h lands in the
// inline namespace kiln::math::<level>, so each level's copies are symbols of
// their own: the linker, which keeps one copy of a weak symbol, cannot hand an
// AVX-512 copy to the SSE4.2 loops (tests/runtime/check_level_symbols.cmake
// checks the objects). Elsewhere (the interpreter, the build's own code) the
// macros are empty.
#pragma once

#ifdef KILN_SIMD_LEVEL
#define KILN_LEVEL_BEGIN inline namespace KILN_SIMD_LEVEL {
#define KILN_LEVEL_END }
#else
#define KILN_LEVEL_BEGIN
#define KILN_LEVEL_END
#endif
