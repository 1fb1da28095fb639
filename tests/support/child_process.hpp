// Runs one of dsa's command-line tools as a child process, for the tests of their exit codes and
// messages: the arguments are shell-quoted, stdout and stderr are captured together, and a crash
// (death by a signal) fails the test, since it is never an acceptable answer to any input.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dsa_test {

/// `s` in single quotes for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  q += '\'';
  return q;
}

struct tool_result {
  int exit_code = -1;
  std::string output;  ///< stdout and stderr, interleaved
};

/// Runs `exe` with `args`; the output goes through a file in `scratch_dir`.
inline tool_result run_tool(const std::string& exe, const std::vector<std::string>& args,
                            const std::filesystem::path& scratch_dir) {
  std::string cmd = shell_quote(exe);
  for (const std::string& a : args) cmd += ' ' + shell_quote(a);
  const std::filesystem::path out = scratch_dir / "tool_output.txt";
  cmd += " > " + shell_quote(out.string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  tool_result r;
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  r.exit_code = WEXITSTATUS(status);
  std::ifstream in(out, std::ios::binary);
  r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

}  // namespace dsa_test
