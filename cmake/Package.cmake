# Debian packages (`cd build && cpack -G DEB`), one per install component:
#   sinkrt_VERSION_ARCH.deb      the tools: what a cluster image installs
#                                (apt install ./sinkrt_*.deb) to run sinkd;
#   sinkrt-dev_VERSION_ARCH.deb  headers, static libraries, CMake and
#                                pkg-config files, for building applications.
# The tools' library dependencies are Debian's package names, computed by
# dpkg-shlibdeps from what the binaries actually link; the dev package names
# the -dev packages its CMake package and headers need.
set(CPACK_PACKAGE_NAME sinkrt)
set(CPACK_PACKAGE_VENDOR "sinkrt developers")
set(CPACK_PACKAGE_CONTACT "sinkrt developers <sinkrt@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++ training runtime with task sinking")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Debian ships binaries stripped of their symbol tables.
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL runtime dev)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME sinkrt)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
string(CONCAT CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "sinkd, the device daemon that runs compiled training steps in sinks, and the\n"
    "tools sinkrun (launch and train), sinkc (compile graphs to task streams),\n"
    "sinkdump (inspect a stream) and sinkprof (profiles).")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME sinkrt-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# What find_package(sinkrt) and the public headers need on the build machine.
# Debian's dnnl-config.cmake asks for OpenCL (its GPU runtime), hence the
# OpenCL headers and loader.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "sinkrt (= ${PROJECT_VERSION}), libdnnl-dev, libflatbuffers-dev, zlib1g-dev, libssl-dev, nlohmann-json3-dev, ocl-icd-opencl-dev, opencl-c-headers, g++ (>= 4:12), cmake (>= 3.25)")
string(CONCAT CPACK_COMPONENT_DEV_DESCRIPTION
    "Headers, static libraries, the CMake package (find_package(sinkrt)) and the\n"
    "pkg-config file for C++ applications that build, compile and train graphs\n"
    "with sinkrt, on an in-process device or on sinkd daemons.")

include(CPack)
