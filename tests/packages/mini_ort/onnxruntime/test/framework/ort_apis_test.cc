// A test of the base tree, so that a run of a stack's own tests can be told from a run of all tests.
#include "gtest/gtest.h"

TEST(OrtApis, BaseTreeTest) { EXPECT_TRUE(true); }
