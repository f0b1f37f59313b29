# Generates C++ headers from schemas/*.fbs at build time (never committed).
set(SINKRT_SCHEMAS common task_stream graph checkpoint wire)
set(SINKRT_GEN_DIR ${CMAKE_BINARY_DIR}/generated/sinkrt/fb)
set(_generated)
foreach(s ${SINKRT_SCHEMAS})
  set(out ${SINKRT_GEN_DIR}/${s}_generated.h)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${FLATC} --cpp --require-explicit-ids --scoped-enums --gen-mutable
            -I ${CMAKE_SOURCE_DIR}/schemas -o ${SINKRT_GEN_DIR}
            ${CMAKE_SOURCE_DIR}/schemas/${s}.fbs
    DEPENDS ${CMAKE_SOURCE_DIR}/schemas/${s}.fbs ${CMAKE_SOURCE_DIR}/schemas/common.fbs ${CMAKE_SOURCE_DIR}/schemas/task_stream.fbs
    COMMENT "flatc ${s}.fbs"
    VERBATIM)
  list(APPEND _generated ${out})
endforeach()
add_custom_target(sinkrt_schemas_gen DEPENDS ${_generated})

add_library(sinkrt_schemas INTERFACE)
add_dependencies(sinkrt_schemas sinkrt_schemas_gen)
target_include_directories(sinkrt_schemas INTERFACE ${CMAKE_BINARY_DIR}/generated)
target_link_libraries(sinkrt_schemas INTERFACE flatbuffers::flatbuffers)
