# kiln_add_library(name folder_alias sources...): one shared library per
# top-level folder, with its public include/ directory, versioned like the project.
function(kiln_add_library name alias)
  add_library(${name} SHARED ${ARGN})
  add_library(kiln::${alias} ALIAS ${name})
  # Installed side by side in lib/, each library finds the others it needs
  # ($ORIGIN), and dependencies outside the system paths (LLVM's lib/), whatever
  # the program linking it has in its RUNPATH.
  set_target_properties(${name} PROPERTIES OUTPUT_NAME ${name}
                        VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                        INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH TRUE)
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE $<BUILD_INTERFACE:kiln_warnings>)
endfunction()
