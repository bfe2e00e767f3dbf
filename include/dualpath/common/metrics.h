// Metrics: the one registry of Prometheus metrics every process of ours exports (docs/metrics.md),
// rendered in the Prometheus text exposition format 0.0.4 and served by metrics_http.h.
//
// A process owns one Registry. Components add Collectors to it: a Family of counters, gauges or
// histograms with labels (values pushed on the hot path: one relaxed atomic add per Inc or
// Observe, no lock), or a CallbackFamily whose values are read at scrape time from counters the
// component already keeps (StoreStats, ServiceStats, ...), so nothing is counted twice. Several
// collectors may contribute series to the same metric name (two engines in one process, a later
// store process adding tier="pool" to the lookup counter): Render merges them under one HELP/TYPE.
//
// Ownership: a Registration (what Registry::Add returns) removes its collector when destroyed and
// waits for a scrape in progress, so a collector whose callbacks read an object may die with it.
// Thread safety: everything may be called from any thread. Family::With takes the family's lock
// (look a series up once and keep the reference: it stays valid as long as the family); Counter,
// Gauge and Histogram updates are lock-free. Callbacks run on the scraping thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dualpath::metrics {

enum class Type { kCounter, kGauge, kHistogram };
std::string_view TypeName(Type t);  // "counter", "gauge", "histogram"

// Text format escaping: HELP text escapes \ and newline; label values also escape ".
std::string EscapeHelp(std::string_view s);
std::string EscapeLabelValue(std::string_view s);
// A sample value as Prometheus parses it: integers exactly, "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);
// [a-zA-Z_:][a-zA-Z0-9_:]* and [a-zA-Z_][a-zA-Z0-9_]* (labels starting "__" are reserved).
bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);

// Collects the samples of every collector for one Render; merges families of the same name.
class Writer {
 public:
  // Starts (or continues) metric `name`. Aborts if the name is invalid or was declared with another
  // type: both are programming errors.
  void Begin(const std::string& name, const std::string& help, Type type);
  // One sample line of the current family: name + suffix ("", "_bucket", "_sum", "_count"),
  // labels as parallel vectors (already validated names, raw values).
  void Sample(std::string_view suffix, const std::vector<std::string>& names,
              const std::vector<std::string>& values, double value);
  std::string Text() const;

 private:
  struct Entry {
    std::string help;
    Type type = Type::kCounter;
    std::string lines;
  };
  std::map<std::string, Entry> families_;
  Entry* current_ = nullptr;
  std::string current_name_;
};

class Collector {
 public:
  virtual ~Collector() = default;
  virtual void Collect(Writer& w) const = 0;
};

class Counter {
 public:
  void Inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  void Add(double d) { v_.fetch_add(d, std::memory_order_relaxed); }
  double Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// Fixed upper bounds (strictly increasing, finite); +Inf is implicit. Observe is lock-free.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts, bounds().size() + 1 of them (the last is +Inf), the sum
  // and the count, read without a lock (a scrape racing an Observe may see one but not the other).
  std::vector<uint64_t> BucketCounts() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// Latency buckets in seconds, 1 ms .. 60 s.
std::vector<double> LatencyBuckets();

// Series of one metric, one per combination of label values.
template <class M>
class Family final : public Collector {
 public:
  // `bounds` only for histograms.
  Family(std::string name, std::string help, std::vector<std::string> labels,
         std::vector<double> bounds = {});
  // The series for these label values (as many as labels), created at zero on first use.
  M& With(const std::vector<std::string>& values);
  void Collect(Writer& w) const override;

 private:
  static Type TypeOf();
  const std::string name_, help_;
  const std::vector<std::string> labels_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_;  // guarded by mu_
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// A counter or gauge whose series are read from a callback at scrape time.
class CallbackFamily final : public Collector {
 public:
  CallbackFamily(std::string name, std::string help, Type type, std::vector<std::string> labels);
  // Adds a series; `read` runs on the scraping thread and must be thread-safe.
  void Add(std::vector<std::string> values, std::function<double()> read);
  void Collect(Writer& w) const override;

 private:
  const std::string name_, help_;
  const Type type_;
  const std::vector<std::string> labels_;
  mutable std::mutex mu_;
  std::vector<std::pair<std::vector<std::string>, std::function<double()>>> series_;
};

class Registry;

// Keeps a collector registered; unregisters (after a scrape in progress) when destroyed.
class Registration {
 public:
  Registration() = default;
  Registration(Registry* r, const Collector* c) : registry_(r), collector_(c) {}
  Registration(Registration&& o) noexcept;
  Registration& operator=(Registration&& o) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration();

 private:
  void Reset();
  Registry* registry_ = nullptr;
  const Collector* collector_ = nullptr;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // `c` must outlive the returned Registration.
  [[nodiscard]] Registration Add(const Collector& c);
  // Every registered collector, in the text exposition format (families sorted by name).
  std::string Render() const;

 private:
  friend class Registration;
  void Remove(const Collector* c);
  mutable std::mutex mu_;                     // held through Render: Remove waits for a scrape
  std::vector<const Collector*> collectors_;  // guarded by mu_
};

// A set of families a component owns and registers together (its Registration goes with it).
class Group {
 public:
  explicit Group(Registry& registry) : registry_(registry) {}
  CounterFamily& Counter(std::string name, std::string help, std::vector<std::string> labels);
  GaugeFamily& Gauge(std::string name, std::string help, std::vector<std::string> labels);
  HistogramFamily& Histogram(std::string name, std::string help, std::vector<std::string> labels,
                             std::vector<double> bounds);
  CallbackFamily& Callback(std::string name, std::string help, Type type,
                           std::vector<std::string> labels);

 private:
  template <class C, class... A>
  C& Make(A&&... args);
  Registry& registry_;
  // Registrations are declared after the collectors: destroyed (unregistered) first.
  std::vector<std::unique_ptr<Collector>> collectors_;
  std::vector<Registration> registrations_;
};

}  // namespace dualpath::metrics
