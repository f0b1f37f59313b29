// The public enums (sinkrt::DType, OpCode, InitKind, BufferRole,
// ProgramKind) against the schemas' (fb::...): every value a schema defines
// must exist in the public enum under the same name, since the stream
// writer, the graph-file reader and writer and every other FlatBuffer
// builder map one to the other by a cast (host/src/util/schema_enums.h,
// runtime/src/schema_enums.h). A value appended to a schema and forgotten in
// the API fails here, naming it. The static_asserts in those two headers
// check the other direction (each public enumerator equals the schema's).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <string>

#include "host/src/util/schema_enums.h"
#include "runtime/src/schema_enums.h"

namespace sinkrt {
namespace {

std::string Lower(const char* s) {
  std::string out;
  for (; *s; ++s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(*s)));
  return out;
}

// "TrainStep" -> "train_step".
std::string Snake(const char* s) {
  std::string out;
  for (const char* p = s; *p; ++p) {
    if (std::isupper(static_cast<unsigned char>(*p)) && p != s) out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  }
  return out;
}

TEST(SchemaEnums, EveryOpCodeOfTheSchemaIsInTheApi) {
  for (fb::OpCode v : fb::EnumValuesOpCode()) {
    const char* schema = fb::EnumNameOpCode(v);
    EXPECT_STREQ(OpCodeName(FromFb(v)), schema)
        << "schemas/common.fbs's OpCode " << schema << " (" << int(v)
        << ") is missing from sinkrt::OpCode (host/include/sinkrt/host/op_code.h)";
    EXPECT_EQ(ToFb(FromFb(v)), v) << schema;
  }
}

TEST(SchemaEnums, EveryInitKindOfTheSchemaIsInTheApi) {
  for (fb::InitKind v : fb::EnumValuesInitKind()) {
    const char* schema = fb::EnumNameInitKind(v);
    EXPECT_STREQ(InitKindName(FromFb(v)), schema)
        << "schemas/common.fbs's InitKind " << schema << " (" << int(v)
        << ") is missing from sinkrt::InitKind (host/include/sinkrt/host/init_kind.h)";
    EXPECT_EQ(ToFb(FromFb(v)), v) << schema;
  }
}

TEST(SchemaEnums, EveryBufferRoleOfTheSchemaIsInTheApi) {
  for (fb::BufferRole v : fb::EnumValuesBufferRole()) {
    const char* schema = fb::EnumNameBufferRole(v);
    EXPECT_STREQ(BufferRoleName(FromFb(v)), schema)
        << "schemas/task_stream.fbs's BufferRole " << schema << " (" << int(v)
        << ") is missing from sinkrt::BufferRole (host/include/sinkrt/host/buffer_role.h)";
    EXPECT_EQ(ToFb(FromFb(v)), v) << schema;
  }
}

// DTypeName is the schema's name in lower case ("bf16").
TEST(SchemaEnums, EveryDTypeOfTheSchemaIsInTheApi) {
  for (fb::DType v : fb::EnumValuesDType()) {
    const char* schema = fb::EnumNameDType(v);
    EXPECT_EQ(DTypeName(FromFb(v)), Lower(schema))
        << "schemas/common.fbs's DType " << schema << " (" << int(v)
        << ") is missing from sinkrt::DType (runtime/include/sinkrt/runtime/dtype.h)";
    EXPECT_EQ(ToFb(FromFb(v)), v) << schema;
  }
}

// ProgramKindName is the schema's name in snake case ("train_step").
TEST(SchemaEnums, EveryProgramKindOfTheSchemaIsInTheApi) {
  for (fb::ProgramKind v : fb::EnumValuesProgramKind()) {
    const char* schema = fb::EnumNameProgramKind(v);
    EXPECT_EQ(ProgramKindName(FromFb(v)), Snake(schema))
        << "schemas/task_stream.fbs's ProgramKind " << schema << " (" << int(v)
        << ") is missing from sinkrt::ProgramKind (runtime/include/sinkrt/runtime/program_kind.h)";
    EXPECT_EQ(ToFb(FromFb(v)), v) << schema;
  }
}

// Messages that print an op's name read as they did when they printed
// fb::EnumNameOpCode: a value from outside the enum (a corrupt graph file)
// names as "" in both.
TEST(SchemaEnums, NamesOfUnknownValuesAreTheSchemasToo) {
  EXPECT_STREQ(OpCodeName(static_cast<OpCode>(999)), fb::EnumNameOpCode(static_cast<fb::OpCode>(999)));
  EXPECT_STREQ(OpCodeName(static_cast<OpCode>(99)), fb::EnumNameOpCode(static_cast<fb::OpCode>(99)));  // a gap
  EXPECT_STREQ(InitKindName(static_cast<InitKind>(200)), fb::EnumNameInitKind(static_cast<fb::InitKind>(200)));
  EXPECT_STREQ(BufferRoleName(static_cast<BufferRole>(200)), "");
  EXPECT_STREQ(DTypeName(static_cast<DType>(200)), "invalid");
  EXPECT_EQ(DTypeSize(static_cast<DType>(200)), 0u);
  EXPECT_EQ(ProgramKindName(static_cast<ProgramKind>(200)), "unknown");
}

}  // namespace
}  // namespace sinkrt
