// amp_level's names (sinkrt/host/amp.h): apart from the pass, so that what
// reads options alone (the stream hash, the manifest) needs only this.
#include <string>

#include "sinkrt/host/amp.h"

namespace sinkrt::host {

const char* AmpLevelName(AmpLevel level) {
  switch (level) {
    case AmpLevel::O0:
      return "O0";
    case AmpLevel::O1:
      return "O1";
    case AmpLevel::O2:
      return "O2";
    case AmpLevel::O3:
      return "O3";
  }
  return "?";
}

Result<AmpLevel> ParseAmpLevel(std::string_view text) {
  if (text.size() == 2 && (text[0] == 'O' || text[0] == 'o') && text[1] >= '0' && text[1] <= '3')
    return static_cast<AmpLevel>(text[1] - '0');
  return InvalidArgument("amp_level must be one of 'O0', 'O1', 'O2', 'O3', but got '" + std::string(text) + "'");
}

}  // namespace sinkrt::host
