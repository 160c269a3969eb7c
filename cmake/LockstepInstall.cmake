# Install rules and the CMake package, so a user's project can:
#   find_package(lockstep REQUIRED)
#   target_link_libraries(app PRIVATE lockstep::lockstep)
include(CMakePackageConfigHelpers)

get_property(lockstep_layers GLOBAL PROPERTY LOCKSTEP_LAYERS)
install(TARGETS ${lockstep_layers} lockstep EXPORT lockstepTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/lockstep DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(lockstep_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${lockstep_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${lockstep_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/LockstepTorch.cmake DESTINATION ${lockstep_cmake_dir})
