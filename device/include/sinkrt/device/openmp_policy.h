/// \file
/// Makes this process's OpenMP team (oneDNN's threads) wait passively.
///
/// libgomp reads OMP_WAIT_POLICY once, in its constructor, before main runs;
/// a spinning team that shares two cores with our own threads loses 5-30x
/// (DESIGN §5). So a program that wants the policy must have it in its
/// environment from the start: EnsurePassiveOpenMp() re-executes the program
/// with OMP_WAIT_POLICY=passive when the variable is unset, and leaves an
/// explicit user choice alone. Call it first thing in main.
#pragma once

namespace sinkrt::device {

/// Re-executes the program (`argv`) with OMP_WAIT_POLICY=passive when the variable is unset;
/// returns otherwise.
void EnsurePassiveOpenMp(char** argv);

}  // namespace sinkrt::device
