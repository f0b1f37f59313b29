# What `cmake --install` puts under a prefix, in two components:
#   runtime: the tools (sinkd, sinkrun, sinkc, sinkdump, sinkprof) and the
#            schemas, all a cluster node needs to run jobs;
#   dev:     the public headers, the static libraries, the CMake package
#            (find_package(sinkrt)) and the pkg-config file, for building
#            C++ applications against sinkrt (docs/guide/install.md).
# `cmake --install build --prefix P` installs both; CPack makes one Debian
# package of each (cmake/Package.cmake).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SINKRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sinkrt)

foreach(lib runtime host device)
  set_target_properties(sinkrt_${lib} PROPERTIES EXPORT_NAME ${lib})
endforeach()
set_target_properties(sinkrt_schemas PROPERTIES EXPORT_NAME schemas)
set_target_properties(sinkrt_sinkrt PROPERTIES EXPORT_NAME sinkrt)

install(TARGETS sinkd sinkrun sinkc sinkdump sinkprof
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# The schemas document the stream, graph, checkpoint and wire formats, and let
# other languages read and write them with flatc.
file(GLOB _sinkrt_schema_files ${PROJECT_SOURCE_DIR}/schemas/*.fbs)
install(FILES ${_sinkrt_schema_files} DESTINATION ${CMAKE_INSTALL_DATADIR}/sinkrt/schemas COMPONENT runtime)

install(TARGETS sinkrt_runtime sinkrt_host sinkrt_device sinkrt_schemas sinkrt_sinkrt
        EXPORT sinkrtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(part runtime host device)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${part}/include/sinkrt/${part}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sinkrt COMPONENT dev FILES_MATCHING PATTERN "*.h")
endforeach()
# The application's umbrella header (all three libraries).
install(FILES ${PROJECT_SOURCE_DIR}/include/sinkrt/sinkrt.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sinkrt COMPONENT dev)
# The generated FlatBuffers headers (sinkrt/fb/) are internal and never
# installed: the public API has enums of its own (DType, OpCode, InitKind,
# BufferRole, ProgramKind), mapped to the schemas' where sinkrt reads and
# writes its files (docs/design/compatibility.md).
# The example application, as a starting point (docs/guide/install.md, "Use sinkrt
# from your C++ application").
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/app/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/app COMPONENT dev)

install(EXPORT sinkrtTargets NAMESPACE sinkrt:: DESTINATION ${SINKRT_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sinkrtConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/sinkrtConfig.cmake
                              INSTALL_DESTINATION ${SINKRT_CMAKE_DIR})
# Within a major release the public headers stay source compatible
# (docs/design/compatibility.md), so find_package(sinkrt 1.0) accepts any 1.x >= 1.0.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/sinkrtConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/sinkrtConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/sinkrtConfigVersion.cmake
        DESTINATION ${SINKRT_CMAKE_DIR} COMPONENT dev)

# pkg-config: the prefix is found from the .pc file's own place, so the file
# is right under any --prefix and inside a package's root.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(SINKRT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(SINKRT_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(SINKRT_PC_PREFIX "\${pcfiledir}/${_up}")
  set(SINKRT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/sinkrt.pc.in ${CMAKE_CURRENT_BINARY_DIR}/sinkrt.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/sinkrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
