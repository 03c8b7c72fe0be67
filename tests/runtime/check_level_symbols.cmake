# Checks that an object of the per-level eager SIMD loops
# (runtime/src/ops/simd/loops.cpp) defines no global or weak symbol outside
# its level namespace. The linker keeps one copy of each weak symbol (inline
# functions, template instances), so a copy compiled for x86-64-v4 that another
# level's object also defines could be what the v2 loops call on an AVX2-only
# CPU: an illegal instruction. Symbols whose name holds the level namespace
# (kiln::math::v3::..., std::pair<kiln::math::v3::...>) exist in one level only.
#
#   cmake -DNM=<nm> -DLEVEL=<v2|v3|v4|native> -DOBJECT=<file.o> -P check_level_symbols.cmake
#         [-- <compiler command that writes OBJECT>]
#
# ALLOW (optional): a regex of symbols known to be the same at every level.
cmake_minimum_required(VERSION 3.20)
foreach(var NM LEVEL OBJECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_level_symbols: -D${var}=... is required")
  endif()
endforeach()

set(command)
set(after_dashes FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_dashes)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_dashes TRUE)
  endif()
endforeach()
if(command)
  execute_process(COMMAND ${command} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_level_symbols: the compile failed (${rc}):\n${err}")
  endif()
endif()

execute_process(COMMAND ${NM} -C --defined-only ${OBJECT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_level_symbols: ${NM} ${OBJECT} failed: ${err}")
endif()
string(REPLACE ";" "\\;" out "${out}")
string(REPLACE "\n" ";" lines "${out}")
set(bad)
set(level_symbols 0)
foreach(line IN LISTS lines)
  # "<address> <type> <name>": upper-case types are global; u (unique), v and
  # w (weak) are merged across objects too.
  if(NOT line MATCHES "^[0-9a-fA-F]* ([A-Zuvw]) (.*)$")
    continue()
  endif()
  set(type "${CMAKE_MATCH_1}")
  set(name "${CMAKE_MATCH_2}")
  if(name MATCHES "(^|[^A-Za-z0-9_])${LEVEL}::")
    math(EXPR level_symbols "${level_symbols} + 1")
  elseif(NOT DEFINED ALLOW OR NOT name MATCHES "${ALLOW}")
    list(APPEND bad "  ${type} ${name}")
  endif()
endforeach()
if(level_symbols EQUAL 0)
  message(FATAL_ERROR "check_level_symbols: ${OBJECT} defines nothing in namespace ${LEVEL}")
endif()
if(bad)
  list(LENGTH bad count)
  string(REPLACE ";" "\n" bad "${bad}")
  message(FATAL_ERROR "check_level_symbols: ${OBJECT} defines ${count} symbols outside its level "
                      "namespace ${LEVEL} (another level's object may define the same):\n${bad}")
endif()
message(STATUS "check_level_symbols: ${OBJECT}: ${level_symbols} symbols, all in ${LEVEL}")
