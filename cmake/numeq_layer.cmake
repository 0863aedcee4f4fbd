# numeq_add_layer(<layer> <source>...): one of numeq's layer libraries, declared the one way all
# four are (formats, core, references, cases): the library numeq_<layer> from src/<source>... of
# the calling folder, its alias numeq::<layer> (exported under that name), its public headers
# under the folder's include/, numeq's warnings for its own sources, and, with NUMEQ_INSTALL, the
# library and its headers installed and exported in numeqTargets. Each layer's CMakeLists.txt
# adds its own dependencies and any further options.
function(numeq_add_layer layer)
  set(target numeq_${layer})
  list(TRANSFORM ARGN PREPEND src/ OUTPUT_VARIABLE sources)
  add_library(${target} ${sources})
  add_library(numeq::${layer} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${layer} OUTPUT_NAME ${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(${target} PRIVATE ${NUMEQ_WARNINGS})
  if(NUMEQ_INSTALL)
    install(TARGETS ${target} EXPORT numeqTargets
      ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
      INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
    install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
endfunction()
