#include "sinkrt/runtime/device_link.h"

#include <cmath>
#include <cstring>

namespace sinkrt {

double ReportedTensor::scalar() const {
  switch (dtype) {
    case DType::F32:
      if (data.size() >= 4) {
        float v;
        std::memcpy(&v, data.data(), 4);
        return v;
      }
      break;
    case DType::F64:
      if (data.size() >= 8) {
        double v;
        std::memcpy(&v, data.data(), 8);
        return v;
      }
      break;
    case DType::I32:
      if (data.size() >= 4) {
        int32_t v;
        std::memcpy(&v, data.data(), 4);
        return v;
      }
      break;
    default:
      break;
  }
  return std::nan("");
}

}  // namespace sinkrt
