#include "dualpath/common/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <utility>

#include "dualpath/common/check.h"

namespace dualpath::metrics {
namespace {

bool NameChar(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (colon && c == ':') return true;
  return first ? alpha : alpha || (c >= '0' && c <= '9');
}

bool ValidName(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, colon)) return false;
  }
  return true;
}

void CheckLabels(const std::string& metric, const std::vector<std::string>& labels) {
  DUALPATH_CHECK(ValidMetricName(metric), fmt::format("metrics: invalid metric name '{}'", metric));
  for (const std::string& l : labels) {
    DUALPATH_CHECK(ValidLabelName(l) && l != "le",
                   fmt::format("metrics: invalid label '{}' of {}", l, metric));
  }
}

}  // namespace

std::string_view TypeName(Type t) {
  switch (t) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Counters of bytes are integers up to 2^53 exactly; print them without an exponent.
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The shortest text that parses back to the same double ("0.1", not "0.10000000000000001").
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool ValidMetricName(std::string_view name) { return ValidName(name, /*colon=*/true); }
bool ValidLabelName(std::string_view name) {
  return ValidName(name, /*colon=*/false) && name.substr(0, 2) != "__";
}

void Writer::Begin(const std::string& name, const std::string& help, Type type) {
  DUALPATH_CHECK(ValidMetricName(name), fmt::format("metrics: invalid metric name '{}'", name));
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.help = help;
    it->second.type = type;
  }
  DUALPATH_CHECK(it->second.type == type, fmt::format("metrics: {} declared as {} and {}", name,
                                                      TypeName(it->second.type), TypeName(type)));
  current_ = &it->second;
  current_name_ = name;
}

void Writer::Sample(std::string_view suffix, const std::vector<std::string>& names,
                    const std::vector<std::string>& values, double value) {
  DUALPATH_CHECK(current_ != nullptr && names.size() == values.size(), "metrics: bad sample");
  std::string& out = current_->lines;
  out += current_name_;
  out += suffix;
  if (!names.empty()) {
    out += '{';
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) out += ',';
      out += names[i];
      out += "=\"";
      out += EscapeLabelValue(values[i]);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += FormatValue(value);
  out += '\n';
}

std::string Writer::Text() const {
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + EscapeHelp(f.help) + "\n";
    out += "# TYPE " + name + " " + std::string(TypeName(f.type)) + "\n";
    out += f.lines;
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    DUALPATH_CHECK(std::isfinite(bounds_[i]) && (i == 0 || bounds_[i] > bounds_[i - 1]),
                   "metrics: histogram bounds must be finite and strictly increasing");
  }
}

void Histogram::Observe(double v) {
  // The first bucket whose upper bound is >= v (Prometheus buckets are "less than or equal").
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

template <class M>
Family<M>::Family(std::string name, std::string help, std::vector<std::string> labels,
                  std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      bounds_(std::move(bounds)) {
  CheckLabels(name_, labels_);
}

template <class M>
M& Family<M>::With(const std::vector<std::string>& values) {
  DUALPATH_CHECK(values.size() == labels_.size(),
                 fmt::format("metrics: {} takes {} label values, got {}", name_, labels_.size(),
                             values.size()));
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<M>& m = series_[values];
  if (m == nullptr) {
    if constexpr (std::is_same_v<M, metrics::Histogram>) {
      m = std::make_unique<M>(bounds_);
    } else {
      m = std::make_unique<M>();
    }
  }
  return *m;
}

template <>
Type Family<Counter>::TypeOf() {
  return Type::kCounter;
}
template <>
Type Family<Gauge>::TypeOf() {
  return Type::kGauge;
}
template <>
Type Family<Histogram>::TypeOf() {
  return Type::kHistogram;
}

template <class M>
void Family<M>::Collect(Writer& w) const {
  w.Begin(name_, help_, TypeOf());
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, m] : series_) {
    if constexpr (std::is_same_v<M, metrics::Histogram>) {
      // Cumulative buckets, le as Prometheus formats bounds, then +Inf, _sum and _count.
      std::vector<std::string> names = labels_, vals = values;
      names.push_back("le");
      vals.emplace_back();
      const std::vector<uint64_t> counts = m->BucketCounts();
      uint64_t cumulative = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        vals.back() = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
        w.Sample("_bucket", names, vals, static_cast<double>(cumulative));
      }
      w.Sample("_sum", labels_, values, m->Sum());
      w.Sample("_count", labels_, values, static_cast<double>(cumulative));
    } else {
      w.Sample("", labels_, values, static_cast<double>(m->Value()));
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

CallbackFamily::CallbackFamily(std::string name, std::string help, Type type,
                               std::vector<std::string> labels)
    : name_(std::move(name)), help_(std::move(help)), type_(type), labels_(std::move(labels)) {
  DUALPATH_CHECK(type_ != Type::kHistogram,
                 fmt::format("metrics: {}: callback histograms are not supported", name_));
  CheckLabels(name_, labels_);
}

void CallbackFamily::Add(std::vector<std::string> values, std::function<double()> read) {
  DUALPATH_CHECK(values.size() == labels_.size(),
                 fmt::format("metrics: {} takes {} label values, got {}", name_, labels_.size(),
                             values.size()));
  std::lock_guard<std::mutex> lock(mu_);
  series_.emplace_back(std::move(values), std::move(read));
}

void CallbackFamily::Collect(Writer& w) const {
  w.Begin(name_, help_, type_);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, read] : series_) w.Sample("", labels_, values, read());
}

Registration::Registration(Registration&& o) noexcept
    : registry_(std::exchange(o.registry_, nullptr)),
      collector_(std::exchange(o.collector_, nullptr)) {}

Registration& Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    Reset();
    registry_ = std::exchange(o.registry_, nullptr);
    collector_ = std::exchange(o.collector_, nullptr);
  }
  return *this;
}

Registration::~Registration() { Reset(); }

void Registration::Reset() {
  if (registry_ != nullptr) registry_->Remove(collector_);
  registry_ = nullptr;
  collector_ = nullptr;
}

Registration Registry::Add(const Collector& c) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(&c);
  return Registration(this, &c);
}

void Registry::Remove(const Collector* c) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.erase(std::remove(collectors_.begin(), collectors_.end(), c), collectors_.end());
}

std::string Registry::Render() const {
  Writer w;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Collector* c : collectors_) c->Collect(w);
  return w.Text();
}

template <class C, class... A>
C& Group::Make(A&&... args) {
  auto c = std::make_unique<C>(std::forward<A>(args)...);
  C& ref = *c;
  collectors_.push_back(std::move(c));
  registrations_.push_back(registry_.Add(ref));
  return ref;
}

CounterFamily& Group::Counter(std::string name, std::string help, std::vector<std::string> labels) {
  return Make<CounterFamily>(std::move(name), std::move(help), std::move(labels));
}
GaugeFamily& Group::Gauge(std::string name, std::string help, std::vector<std::string> labels) {
  return Make<GaugeFamily>(std::move(name), std::move(help), std::move(labels));
}
HistogramFamily& Group::Histogram(std::string name, std::string help,
                                  std::vector<std::string> labels, std::vector<double> bounds) {
  return Make<HistogramFamily>(std::move(name), std::move(help), std::move(labels),
                               std::move(bounds));
}
CallbackFamily& Group::Callback(std::string name, std::string help, Type type,
                                std::vector<std::string> labels) {
  return Make<CallbackFamily>(std::move(name), std::move(help), type, std::move(labels));
}

}  // namespace dualpath::metrics
