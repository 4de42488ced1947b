// mini_gtest: the part of googletest's interface that mini_ort's tests use (TEST, EXPECT_EQ, EXPECT_TRUE),
// with the command line a runner relies on: --gtest_filter=POSITIVE[-NEGATIVE] ('*' and '?' wildcards,
// ':'-separated) and --gtest_output=json:PATH in googletest's JSON layout. Original code.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace mini_gtest {

struct Case {
  std::string suite;
  std::string name;
  std::function<void()> body;
};

std::vector<Case>& Registry();
void Fail(const std::string& message);

struct Registrar {
  Registrar(const char* suite, const char* name, std::function<void()> body) {
    Registry().push_back({suite, name, std::move(body)});
  }
};

template <typename A, typename B>
void ExpectEq(const A& expected, const B& actual, const char* expected_text, const char* actual_text,
              const char* file, int line) {
  if (!(expected == actual)) {
    std::ostringstream message;
    message << file << ":" << line << ": expected " << expected_text << " == " << actual_text << ", got "
            << expected << " and " << actual;
    Fail(message.str());
  }
}

}  // namespace mini_gtest

#define TEST(suite, name)                                                                          \
  static void suite##_##name##_Body();                                                             \
  static const ::mini_gtest::Registrar suite##_##name##_registrar(#suite, #name, suite##_##name##_Body); \
  static void suite##_##name##_Body()

#define EXPECT_EQ(expected, actual) \
  ::mini_gtest::ExpectEq((expected), (actual), #expected, #actual, __FILE__, __LINE__)
#define EXPECT_TRUE(condition) \
  ((condition) ? (void)0 : ::mini_gtest::Fail(std::string(__FILE__) + ": expected " #condition))
