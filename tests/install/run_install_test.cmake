# Script run by the install_consumer test (cmake -P): installs kiln into a
# scratch prefix, builds an out-of-tree consumer against it (find_package(kiln),
# kiln::kiln) and runs it, and the installed kilnrun with it, with no
# LD_LIBRARY_PATH: the installed binaries must find kiln's libraries by RUNPATH.
file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK}/build -G ${GENERATOR}
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "building the consumer failed:\n${out}")
endif()
# Compiled kernels go to a scratch cache, not the user's ~/.cache.
set(run ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH KILN_CACHE_DIR=${WORK}/kernel-cache)
execute_process(COMMAND ${run} ${WORK}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(rc OR NOT out MATCHES "sum=6" OR NOT out MATCHES "compiled loss [^\n]* down")
  message(FATAL_ERROR "consumer failed (${rc}):\n${out}")
endif()
message(STATUS "consumer printed: ${out}")
execute_process(COMMAND ${run} ${prefix}/bin/kilnrun --nproc-per-node 2 ${WORK}/build/consumer
                        --worker
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 120)
if(rc OR NOT out MATCHES "allreduce=3")
  message(FATAL_ERROR "kilnrun with the consumer failed (${rc}):\n${out}")
endif()
message(STATUS "kilnrun printed: ${out}")
