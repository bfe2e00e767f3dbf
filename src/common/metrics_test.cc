// The Prometheus text exposition format (0.0.4) of metrics::Registry: HELP/TYPE lines, escaping,
// histogram buckets, merged families, and increments from several threads.
#include "dualpath/common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

namespace dualpath::metrics {
namespace {

TEST(MetricsFormat, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue(R"(a"b\c)"
                             "\n"),
            R"(a\"b\\c\n)");
  // HELP keeps double quotes as they are (only \ and newline are escaped there).
  EXPECT_EQ(EscapeHelp("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");
}

TEST(MetricsFormat, Values) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(12345678901234), "12345678901234");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(MetricsFormat, Names) {
  EXPECT_TRUE(ValidMetricName("dualpath_engine_read_bytes_total"));
  EXPECT_TRUE(ValidMetricName("job:rate5m"));
  EXPECT_FALSE(ValidMetricName("9lives"));
  EXPECT_FALSE(ValidMetricName("a-b"));
  EXPECT_FALSE(ValidMetricName(""));
  EXPECT_TRUE(ValidLabelName("path"));
  EXPECT_FALSE(ValidLabelName("__name__"));
  EXPECT_FALSE(ValidLabelName("a:b"));
}

TEST(MetricsRegistry, CounterWithEscapedLabels) {
  Registry r;
  Group g(r);
  CounterFamily& c = g.Counter("dp_reads_total", "Reads.\nSecond line", {"path", "note"});
  c.With({"pe", "say \"x\""}).Inc(3);
  c.With({"de", "back\\slash"}).Inc();
  EXPECT_EQ(r.Render(),
            "# HELP dp_reads_total Reads.\\nSecond line\n"
            "# TYPE dp_reads_total counter\n"
            "dp_reads_total{path=\"de\",note=\"back\\\\slash\"} 1\n"
            "dp_reads_total{path=\"pe\",note=\"say \\\"x\\\"\"} 3\n");
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeWithInf) {
  Registry r;
  Group g(r);
  HistogramFamily& h = g.Histogram("dp_latency_seconds", "Latency.", {"phase"}, {0.1, 1});
  Histogram& pre = h.With({"prefill"});
  pre.Observe(0.05);
  pre.Observe(0.1);  // le is inclusive: counts in the 0.1 bucket
  pre.Observe(0.5);
  pre.Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP dp_latency_seconds Latency.\n"
            "# TYPE dp_latency_seconds histogram\n"
            "dp_latency_seconds_bucket{phase=\"prefill\",le=\"0.1\"} 2\n"
            "dp_latency_seconds_bucket{phase=\"prefill\",le=\"1\"} 3\n"
            "dp_latency_seconds_bucket{phase=\"prefill\",le=\"+Inf\"} 4\n"
            "dp_latency_seconds_sum{phase=\"prefill\"} 7.65\n"
            "dp_latency_seconds_count{phase=\"prefill\"} 4\n");
}

TEST(MetricsRegistry, CallbackFamiliesMergeUnderOneHeader) {
  Registry r;
  uint64_t store_hits = 5;
  auto a = std::make_unique<Group>(r);
  a->Callback("dp_lookups_total", "Lookups.", Type::kCounter, {"tier"}).Add({"store"}, [&] {
    return static_cast<double>(store_hits);
  });
  Group b(r);
  b.Callback("dp_lookups_total", "Lookups.", Type::kCounter, {"tier"}).Add({"pool"}, [] {
    return 2.0;
  });
  store_hits = 6;  // read at scrape time
  const std::string text = r.Render();
  EXPECT_EQ(text,
            "# HELP dp_lookups_total Lookups.\n"
            "# TYPE dp_lookups_total counter\n"
            "dp_lookups_total{tier=\"store\"} 6\n"
            "dp_lookups_total{tier=\"pool\"} 2\n");
  a.reset();  // unregistered with its group
  EXPECT_EQ(r.Render().find("store"), std::string::npos);
  EXPECT_NE(r.Render().find("tier=\"pool\"} 2"), std::string::npos);
}

TEST(MetricsRegistryDeathTest, BadNamesAndTypeClashesAbort) {
  Registry r;
  EXPECT_DEATH(CounterFamily("bad-name", "x", {}), "invalid metric name");
  EXPECT_DEATH(CounterFamily("ok", "x", {"le"}), "invalid label");
  Group g(r);
  g.Counter("dp_x", "x", {}).With({}).Inc();
  g.Gauge("dp_x", "x", {}).With({}).Set(1);
  EXPECT_DEATH((void)r.Render(), "declared as counter and gauge");
}

TEST(MetricsRegistry, ConcurrentIncrementsAndScrapes) {
  Registry r;
  Group g(r);
  Counter& c = g.Counter("dp_n_total", "n", {}).With({});
  Histogram& h = g.Histogram("dp_h", "h", {}, {1}).With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Inc();
        h.Observe(0.5);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 50; ++i) (void)r.Render();
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.Value(), 40000u);
  EXPECT_NE(r.Render().find("dp_h_count 40000\n"), std::string::npos);
  EXPECT_DOUBLE_EQ(h.Sum(), 20000);
}

}  // namespace
}  // namespace dualpath::metrics
