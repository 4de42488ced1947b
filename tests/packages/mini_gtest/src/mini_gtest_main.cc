// mini_gtest's runner (see gtest/gtest.h). Original code.
#include "gtest/gtest.h"

#include <fstream>
#include <iostream>

namespace mini_gtest {

std::vector<Case>& Registry() {
  static std::vector<Case> cases;
  return cases;
}

namespace {
std::vector<std::string>* current_failures = nullptr;

bool Matches(const char* pattern, const char* text) {
  if (*pattern == '\0') return *text == '\0';
  if (*pattern == '*') return Matches(pattern + 1, text) || (*text != '\0' && Matches(pattern, text + 1));
  if (*text != '\0' && (*pattern == '?' || *pattern == *text)) return Matches(pattern + 1, text + 1);
  return false;
}

bool MatchesAny(const std::string& patterns, const std::string& name) {
  std::istringstream list(patterns);
  std::string pattern;
  while (std::getline(list, pattern, ':')) {
    if (!pattern.empty() && Matches(pattern.c_str(), name.c_str())) return true;
  }
  return false;
}

std::string Escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n') ? ' ' : c;
  }
  return out;
}
}  // namespace

void Fail(const std::string& message) {
  std::cout << message << "\n";
  current_failures->push_back(message);
}

}  // namespace mini_gtest

int main(int argc, char** argv) {
  std::string filter = "*";
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--gtest_filter=", 0) == 0) filter = arg.substr(15);
    if (arg.rfind("--gtest_output=json:", 0) == 0) json_path = arg.substr(20);
  }
  const auto dash = filter.find('-');
  const std::string positive = dash == std::string::npos ? filter : filter.substr(0, dash);
  const std::string negative = dash == std::string::npos ? "" : filter.substr(dash + 1);

  struct Result {
    const mini_gtest::Case* test;
    std::vector<std::string> failures;
  };
  std::vector<Result> results;
  for (const auto& test : mini_gtest::Registry()) {
    const std::string full = test.suite + "." + test.name;
    if (!mini_gtest::MatchesAny(positive.empty() ? "*" : positive, full) || mini_gtest::MatchesAny(negative, full)) {
      continue;
    }
    results.push_back({&test, {}});
    mini_gtest::current_failures = &results.back().failures;
    std::cout << "[ RUN      ] " << full << "\n";
    test.body();
    std::cout << (results.back().failures.empty() ? "[       OK ] " : "[  FAILED  ] ") << full << "\n";
  }

  int failed = 0;
  for (const auto& result : results) failed += result.failures.empty() ? 0 : 1;
  std::cout << "[==========] " << results.size() << " tests ran.\n";
  std::cout << "[  PASSED  ] " << results.size() - failed << " tests.\n";
  if (!json_path.empty()) {
    // googletest's layout: testsuites, each with its testsuite list of cases and their failures.
    std::ofstream json(json_path);
    json << "{\"tests\": " << results.size() << ", \"failures\": " << failed << ", \"testsuites\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& result = results[i];
      json << (i ? ", " : "") << "{\"name\": \"" << result.test->suite << "\", \"testsuite\": [{\"name\": \""
           << result.test->name << "\", \"result\": \"COMPLETED\", \"failures\": [";
      for (size_t f = 0; f < result.failures.size(); ++f) {
        json << (f ? ", " : "") << "{\"failure\": \"" << mini_gtest::Escaped(result.failures[f]) << "\"}";
      }
      json << "]}]}";
    }
    json << "]}\n";
  }
  return failed ? 1 : 0;
}
