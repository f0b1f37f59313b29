/// \file
/// InitKind: how a tensor's initial contents are produced (InitSpec::kind).
#pragma once

#include <cstdint>

namespace sinkrt {

/// How init fills a tensor. The enumerators and their values are
/// schemas/common.fbs's InitKind's (host/src/util/schema_enums.h maps the
/// two and checks they agree). Random kinds draw from sinkrt's
/// counter-based generator, so every replica and platform gets the same
/// values.
enum class InitKind : uint8_t {
  None = 0,           ///< contents undefined until written (activations, inputs)
  Zeros = 1,          ///< all zeros
  Constant = 2,       ///< every element one value
  Uniform = 3,        ///< U(low, high)
  Normal = 4,         ///< N(mean, stddev)
  XavierUniform = 5,  ///< Glorot's uniform, from the fans
  XavierNormal = 6,   ///< Glorot's normal, from the fans
  HeUniform = 7,      ///< He's uniform, from the fans
  HeNormal = 8,       ///< He's normal, from the fans
  Inline = 9,         ///< given bytes
};

/// The kind's name, as its enumerator is spelled ("XavierUniform"); "" for
/// a value from outside the enum.
const char* InitKindName(InitKind kind);

}  // namespace sinkrt
