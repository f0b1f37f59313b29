// JSON <-> binary through FlatBuffers' schema-driven parser and text
// generator, with the schema text compiled in (graph_schema_text.h is
// generated from schemas/*.fbs at build time).
#include <flatbuffers/idl.h>

#include "host/src/graph/file/graph_file_internal.h"
#include "sinkrt/fb/graph_schema_text.h"
#include "sinkrt/host/compiler.h"

namespace sinkrt::host {
namespace graph_file {
namespace {

// A parser that knows graph.fbs. common.fbs comes first, in the same parse,
// because the embedded graph.fbs has its include line dropped.
Status LoadSchema(flatbuffers::Parser& parser) {
  const std::string schema = std::string(fb::kCommonSchemaText) + "\n" + fb::kGraphSchemaText;
  if (!parser.Parse(schema.c_str())) return Internal("the embedded graph schema does not parse: " + parser.error_);
  return Status::Ok();
}

// The parser reports "LINE: COL: error: MESSAGE"; the file name goes first,
// as a compiler would put it.
std::string ParserError(const std::string& source, std::string error) {
  while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  const size_t a = error.find(": ");
  const size_t b = a == std::string::npos ? a : error.find(": ", a + 2);
  if (b != std::string::npos) {
    const std::string line = error.substr(0, a), col = error.substr(a + 2, b - a - 2);
    std::string message = error.substr(b + 2);
    if (message.rfind("error: ", 0) == 0) message = message.substr(7);
    return source + ":" + line + ":" + col + ": " + message;
  }
  return source + ": " + error;
}

bool IsNumberChar(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

// The generator puts each element of a vector on its own line; shapes and
// byte arrays read better as [64, 784]. Only arrays of plain numbers are
// folded, and never inside a string.
std::string FoldNumberArrays(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c != '[') {
      out += c;
      continue;
    }
    size_t j = i + 1;
    std::vector<std::string> items(1);
    bool numbers = true;
    for (; j < text.size() && text[j] != ']'; ++j) {
      const char d = text[j];
      if (d == ',') {
        items.emplace_back();
      } else if (IsNumberChar(d)) {
        items.back() += d;
      } else if (d != ' ' && d != '\n' && d != '\r' && d != '\t') {
        numbers = false;
        break;
      }
    }
    if (!numbers || j == text.size()) {
      out += c;
      continue;
    }
    out += '[';
    for (size_t k = 0; k < items.size(); ++k) out += (k ? ", " : "") + items[k];
    out += ']';
    i = j;
  }
  return out;
}

}  // namespace

Result<std::vector<uint8_t>> JsonToBinary(std::string_view text, const std::string& source) {
  flatbuffers::Parser parser;
  SINKRT_RETURN_IF_ERROR(LoadSchema(parser));
  const std::string terminated(text);  // the parser reads up to a NUL
  if (!parser.Parse(terminated.c_str())) return InvalidArgument(ParserError(source, parser.error_));
  const uint8_t* p = parser.builder_.GetBufferPointer();
  return std::vector<uint8_t>(p, p + parser.builder_.GetSize());
}

}  // namespace graph_file

Result<std::string> GraphToJson(std::span<const uint8_t> binary, const std::string& source) {
  SINKRT_ASSIGN_OR_RETURN(const fb::Graph* def, graph_file::VerifyBinary(binary, source));
  (void)def;
  flatbuffers::Parser parser;
  SINKRT_RETURN_IF_ERROR(graph_file::LoadSchema(parser));
  parser.opts.strict_json = true;
  parser.opts.indent_step = 2;
  std::string text;
  if (!flatbuffers::GenerateText(parser, binary.data(), &text))
    return InvalidArgument(source + ": cannot spell the graph as JSON (a string is not valid UTF-8)");
  text = graph_file::FoldNumberArrays(text);

  // FlatBuffers 2.0 prints floats with six decimals: a value such as 1e-7
  // would silently become 0. A graph that reads differently from its JSON
  // is refused rather than changed.
  Result<GraphFile> before = ParseGraph(binary, source);
  if (before.ok()) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> again, graph_file::JsonToBinary(text, source));
    Result<GraphFile> after = ParseGraph(again, source);
    const auto same_optimizer = [](const std::optional<OptimizerSpec>& a, const std::optional<OptimizerSpec>& b) {
      if (a.has_value() != b.has_value()) return false;
      if (!a) return true;
      return *a == *b;
    };
    if (!after.ok() || GraphHash(after->graph) != GraphHash(before->graph) ||
        !same_optimizer(after->optimizer, before->optimizer))
      return InvalidArgument(source +
                             ": the JSON spelling would change the graph: FlatBuffers prints floats with "
                             "six decimals, and a value here (an initialiser or optimizer setting) needs "
                             "more; keep this graph binary");
  }
  return text;
}

}  // namespace sinkrt::host
