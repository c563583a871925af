// The facts of this build (version, torch, compiler, backends, CANN toolkit), compiled into one
// small translation unit: CMake hands them to csrc/build_facts.cpp alone as compile definitions,
// so a new version tag recompiles that file and nothing else.
#pragma once

namespace specops::build_facts {

extern const char* const kVersion;
extern const char* const kTorchVersion;
extern const char* const kCompiler;
extern const char* const kBackends;  // comma-separated, e.g. "cpu,ascend"
extern const char* const kCannVersion;  // empty without a CANN toolkit

}  // namespace specops::build_facts
