// Tests of runtime/src/env.cpp: the registry's readers, and that a switch or a
// choice set to anything but its listed values is a kiln::Error naming the
// variable (never silently read as off).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/error_of.h"
#include "kiln/env.h"
#include "kiln/error.h"

using namespace kiln;

using kiln::testing::error_of;

namespace {

// Sets one registered variable for a scope and restores it after. KILN_LOG
// and KILN_DUMP are not read by anything these tests run.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST(Env, FlagIsZeroOrOneAndUnsetIsTheFallback) {
  {
    ScopedEnv e("KILN_LOG", nullptr);
    EXPECT_TRUE(env::get_flag("KILN_LOG", true));
    EXPECT_FALSE(env::get_flag("KILN_LOG", false));
  }
  {
    ScopedEnv e("KILN_LOG", "");
    EXPECT_TRUE(env::get_flag("KILN_LOG", true));
  }
  {
    ScopedEnv e("KILN_LOG", "0");
    EXPECT_FALSE(env::get_flag("KILN_LOG", true));
  }
  {
    ScopedEnv e("KILN_LOG", "1");
    EXPECT_TRUE(env::get_flag("KILN_LOG", false));
  }
}

// "true", "yes" or "2" used to read as off wherever a switch compared with
// "1": the user asked for something and silently did not get it.
TEST(Env, AFlagSetToAnythingElseIsAnError) {
  for (const char* v : {"true", "yes", "2", " 1", "on"}) {
    ScopedEnv e("KILN_LOG", v);
    EXPECT_EQ(error_of([] { env::get_flag("KILN_LOG", false); }),
              str("[env] KILN_LOG='", v, "': expected one of 0, 1"));
  }
}

TEST(Env, ChoiceListsItsValues) {
  {
    ScopedEnv e("KILN_DUMP", "all");
    EXPECT_EQ(env::get_choice("KILN_DUMP", {"0", "1", "all"}, "1"), "all");
  }
  {
    ScopedEnv e("KILN_DUMP", nullptr);
    EXPECT_EQ(env::get_choice("KILN_DUMP", {"0", "1", "all"}, "1"), "1");
  }
  ScopedEnv e("KILN_DUMP", "every");
  EXPECT_EQ(error_of([] {
              env::get_choice("KILN_DUMP", {"0", "1", "all"}, "1");
            }),
            "[env] KILN_DUMP='every': expected one of 0, 1, all");
}

TEST(Env, IntegerValues) {
  {
    ScopedEnv e("KILN_PLAN_LIMIT", "12");
    EXPECT_EQ(env::get_int("KILN_PLAN_LIMIT", 64), 12);
  }
  {
    ScopedEnv e("KILN_PLAN_LIMIT", nullptr);
    EXPECT_EQ(env::get_int("KILN_PLAN_LIMIT", 64), 64);
  }
  ScopedEnv e("KILN_PLAN_LIMIT", "12x");
  EXPECT_EQ(error_of([] { env::get_int("KILN_PLAN_LIMIT", 64); }),
            "[env] KILN_PLAN_LIMIT='12x' is not an integer");
}

// An unregistered name is kiln's bug, not the user's: an InternalError.
TEST(Env, AnUnregisteredNameIsAnInternalError) {
  EXPECT_THROW(env::get("KILN_NOT_A_VARIABLE"), InternalError);
}
