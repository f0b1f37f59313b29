# Generates C++ headers from schemas/*.fbs at build time (never committed).
set(SINKRT_SCHEMAS common task_stream graph checkpoint wire)
set(SINKRT_GEN_DIR ${PROJECT_BINARY_DIR}/generated/sinkrt/fb)
set(_generated)
foreach(s ${SINKRT_SCHEMAS})
  set(out ${SINKRT_GEN_DIR}/${s}_generated.h)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${FLATC} --cpp --require-explicit-ids --scoped-enums --gen-mutable
            -I ${PROJECT_SOURCE_DIR}/schemas -o ${SINKRT_GEN_DIR}
            ${PROJECT_SOURCE_DIR}/schemas/${s}.fbs
    DEPENDS ${PROJECT_SOURCE_DIR}/schemas/${s}.fbs ${PROJECT_SOURCE_DIR}/schemas/common.fbs ${PROJECT_SOURCE_DIR}/schemas/task_stream.fbs
    COMMENT "flatc ${s}.fbs"
    VERBATIM)
  list(APPEND _generated ${out})
endforeach()
# The graph file reader parses JSON against the schema text at run time.
set(_schema_text ${SINKRT_GEN_DIR}/graph_schema_text.h)
add_custom_command(
  OUTPUT ${_schema_text}
  COMMAND ${CMAKE_COMMAND} -DOUT=${_schema_text}
          "-DSCHEMAS=Common=${PROJECT_SOURCE_DIR}/schemas/common.fbs|Graph=${PROJECT_SOURCE_DIR}/schemas/graph.fbs"
          -P ${PROJECT_SOURCE_DIR}/cmake/EmbedSchemaText.cmake
  DEPENDS ${PROJECT_SOURCE_DIR}/schemas/common.fbs ${PROJECT_SOURCE_DIR}/schemas/graph.fbs
          ${PROJECT_SOURCE_DIR}/cmake/EmbedSchemaText.cmake
  COMMENT "embed graph.fbs text"
  VERBATIM)
list(APPEND _generated ${_schema_text})
add_custom_target(sinkrt_schemas_gen DEPENDS ${_generated})

add_library(sinkrt_schemas INTERFACE)
add_dependencies(sinkrt_schemas sinkrt_schemas_gen)
target_include_directories(sinkrt_schemas INTERFACE $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
target_link_libraries(sinkrt_schemas INTERFACE flatbuffers::flatbuffers)
