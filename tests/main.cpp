#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <ostream>

namespace {

// doctest only counts the cases a `doctest::skip` decorator leaves out; this names each on standard
// output with its reason (the case's `doctest::description`), one line that ctest's log keeps and
// tests/run's skip summary reads:
//   SKIPPED: "a training step and an evaluation in the arena allocate nothing, whatever the shapes": AddressSanitizer owns malloc here
// Every case a skip decorator holds back is named, also in a run filtered to other cases.
struct skip_listener : doctest::IReporter {
  explicit skip_listener(const doctest::ContextOptions& options) : options_(options) {}

  void test_case_skipped(const doctest::TestCaseData& tc) override {
    if (!tc.m_skip || options_.no_skip || options_.cout == nullptr) return;  // filtered out, or run anyway
    *options_.cout << "SKIPPED: \"" << tc.m_name
                   << "\": " << (tc.m_description != nullptr ? tc.m_description : "no reason given") << std::endl;
  }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}

 private:
  const doctest::ContextOptions& options_;
};

}  // namespace

DOCTEST_REGISTER_LISTENER("skips", 1, skip_listener);
