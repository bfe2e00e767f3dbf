// The AVX2 kernels are bit-identical to the baseline ones: every kernel and every whole loop of
// both KernelTables on seeded random inputs of many lengths (tails that are not multiples of 8
// included), compared with memcmp; then whole models forced onto each path through
// DUALPATH_MODEL_ISA. Also the selection rules (a forced AVX2 on a CPU without it is an error).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/kernel_table.h"
#include "model/kernels.h"
#include "model/test_util.h"

namespace dualpath::model::internal {
namespace {

bool SameBits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}
bool SameBits(float a, float b) { return SameBits(&a, &b, 1); }

// Magnitudes over 2^-10 .. 2^10 (a different summation order shows), with some exact zeros of
// both signs and repeated values (ties for Max).
std::vector<float> Values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const uint64_t r = rng();
    if (r % 17 == 0) {
      x = (r & 32) ? -0.0f : 0.0f;
    } else {
      const float m = static_cast<float>((r >> 8) % 1000000) / 1000000.0f - 0.5f;
      x = std::ldexp(m, static_cast<int>((r >> 40) % 21) - 10);
    }
  }
  return v;
}

// The AVX2 table, or nullptr (the caller skips) on a CPU without AVX2.
const KernelTable* Avx2OrNull() { return CpuHasAvx2() ? Avx2Kernels() : nullptr; }

#define REQUIRE_AVX2(var)                                          \
  const KernelTable* var = Avx2OrNull();                           \
  if (var == nullptr) GTEST_SKIP() << "this CPU has no AVX2 path"; \
  const KernelTable& base = BaselineKernels()

TEST(KernelSelection, RulesForEveryRequest) {
  const KernelTable* base = &BaselineKernels();
  auto pick = [](std::string_view req, bool avx2) { return SelectKernels(req, avx2); };
  ASSERT_TRUE(pick("", false).ok());
  EXPECT_EQ(pick("", false).value(), base);
  EXPECT_EQ(pick("auto", false).value(), base);
  EXPECT_EQ(pick("baseline", false).value(), base);
  EXPECT_EQ(pick("baseline", true).value(), base);
  if (Avx2Kernels() != nullptr) {
    EXPECT_EQ(pick("", true).value(), Avx2Kernels());
    EXPECT_EQ(pick("auto", true).value(), Avx2Kernels());
    EXPECT_EQ(pick("avx2", true).value(), Avx2Kernels());
    EXPECT_STREQ(Avx2Kernels()->isa, "avx2");
  }
  EXPECT_STREQ(base->isa, "baseline");

  // Forcing AVX2 on a CPU without it: a clear error, not a crash (SIGILL) later.
  const auto no_avx2 = pick("avx2", false);
  ASSERT_FALSE(no_avx2.ok());
  EXPECT_EQ(no_avx2.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(no_avx2.status().message().find("DUALPATH_MODEL_ISA=avx2"), std::string::npos);

  const auto bad = pick("avx512", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'avx512'"), std::string::npos);
  EXPECT_FALSE(pick("AVX2", true).ok());  // exact spelling only
}

TEST(Avx2Kernels, ReductionsAreBitIdenticalForEveryLength) {
  REQUIRE_AVX2(avx2);
  constexpr size_t kMax = 300;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const auto a = Values(kMax, 10 + seed), b = Values(kMax, 20 + seed),
               c = Values(kMax, 30 + seed);
    for (size_t n = 0; n <= kMax; n += (n < 80 ? 1 : 7)) {
      EXPECT_TRUE(SameBits(base.dot(a.data(), b.data(), n), avx2->dot(a.data(), b.data(), n)))
          << "dot n=" << n;
      EXPECT_TRUE(SameBits(base.sum(a.data(), n), avx2->sum(a.data(), n))) << "sum n=" << n;
      const float* rows[4] = {b.data(), a.data(), c.data(), b.data()};
      float want[4], got[4];
      base.dot4(a.data(), rows, n, want);
      avx2->dot4(a.data(), rows, n, got);
      EXPECT_TRUE(SameBits(want, got, 4)) << "dot4 n=" << n;
      if (n > 0) {
        // Max: the same value (see kernels_avx2.h on the sign of a zero maximum).
        EXPECT_EQ(base.max(a.data(), n), avx2->max(a.data(), n)) << "max n=" << n;
      }
    }
  }
}

TEST(Avx2Kernels, ElementwiseKernelsAreBitIdentical) {
  REQUIRE_AVX2(avx2);
  const auto x = Values(4 * 131, 5);
  const float w[4] = {0.75f, -1.5f, 3.0e-3f, 12.5f};
  for (size_t n = 0; n <= 131; ++n) {
    // Exp over the clamped range and beyond, shifted as attention does.
    std::vector<float> e1(n), e2;
    for (size_t i = 0; i < n; ++i) e1[i] = -120.0f + 1.7f * static_cast<float>(i) + x[i];
    e2 = e1;
    base.exp_shifted(e1.data(), n, 3.25f);
    avx2->exp_shifted(e2.data(), n, 3.25f);
    EXPECT_TRUE(SameBits(e1.data(), e2.data(), n)) << "exp n=" << n;

    std::vector<float> y1 = Values(n, 6 + n), y2 = y1;
    base.axpy(w[1], x.data(), y1.data(), n);
    avx2->axpy(w[1], x.data(), y2.data(), n);
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), n)) << "axpy n=" << n;
    base.axpy4(w, x.data(), x.data() + 131, x.data() + 262, x.data() + 393, y1.data(), n);
    avx2->axpy4(w, x.data(), x.data() + 131, x.data() + 262, x.data() + 393, y2.data(), n);
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), n)) << "axpy4 n=" << n;
  }
  // The zero-sign case Max may differ on does not change the softmax weight of the maximum.
  EXPECT_TRUE(SameBits(Exp(-0.0f), Exp(0.0f)));
}

TEST(Avx2Kernels, ProjectionsNormsAndMlpAreBitIdentical) {
  REQUIRE_AVX2(avx2);
  struct Shape {
    size_t rows, cols, n;
  };
  for (const Shape s : {Shape{97, 30, 1}, Shape{128, 128, 19}, Shape{7, 13, 9}, Shape{64, 256, 8},
                        Shape{5, 8, 33}}) {
    const auto w = Values(s.rows * s.cols, 40), x = Values(s.cols * s.n, 41);
    std::vector<float> y1(s.rows * s.n), y2(y1.size());
    base.mat_vec_tokens(w.data(), s.rows, s.cols, x.data(), y1.data(), s.n);
    avx2->mat_vec_tokens(w.data(), s.rows, s.cols, x.data(), y2.data(), s.n);
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), y1.size())) << s.rows << "x" << s.cols;
    base.mat_vec(w.data(), s.rows, s.cols, x.data(), y1.data());
    avx2->mat_vec(w.data(), s.rows, s.cols, x.data(), y2.data());
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), s.rows)) << s.rows << "x" << s.cols;

    const auto gain = Values(s.cols, 42);
    std::vector<float> n1(s.cols * s.n), n2(n1.size());
    base.rms_norm_rows(x.data(), gain.data(), s.cols, s.n, n1.data());
    avx2->rms_norm_rows(x.data(), gain.data(), s.cols, s.n, n2.data());
    EXPECT_TRUE(SameBits(n1.data(), n2.data(), n1.size())) << s.cols;

    const size_t ffn = s.cols;  // gate_up rows of 2 * ffn
    const auto gu = Values(2 * ffn * s.n, 43);
    std::vector<float> a1(ffn * s.n), a2(a1.size());
    base.swiglu_rows(gu.data(), ffn, s.n, a1.data());
    avx2->swiglu_rows(gu.data(), ffn, s.n, a2.data());
    EXPECT_TRUE(SameBits(a1.data(), a2.data(), a1.size())) << ffn;
  }
}

TEST(Avx2Kernels, AttentionIsBitIdentical) {
  REQUIRE_AVX2(avx2);
  struct Case {
    AttentionShape shape;
    uint64_t start;
    size_t n;
  };
  auto shape = [](size_t qh, size_t kvh, size_t hd) {
    return AttentionShape{qh, kvh, hd, 2 * kvh * hd * sizeof(float)};
  };
  const Case cases[] = {
      {shape(4, 4, 32), 0, 40},   // default head shape, prefill crossing attention groups
      {shape(4, 4, 32), 300, 1},  // decode step
      {shape(4, 2, 32), 123, 37}, {shape(3, 3, 10), 5, 21},  // tails in every dot product
      {shape(6, 2, 13), 0, 17},   {shape(2, 1, 8), 77, 3},
  };
  for (const Case& c : cases) {
    const size_t q_dim = c.shape.q_heads * c.shape.head_dim;
    const size_t total = c.start + c.n;
    const auto kvf = Values(total * c.shape.kv_row_bytes / sizeof(float), 50 + c.start);
    std::vector<std::byte> kv(kvf.size() * sizeof(float));
    std::memcpy(kv.data(), kvf.data(), kv.size());
    const size_t stride = q_dim + 5;  // q rows inside wider rows, as ForwardLayer's QKV
    const auto q = Values(c.n * stride, 60 + c.n);
    std::vector<float> o1(c.n * q_dim), o2(o1.size()), scratch;
    base.causal_attention(c.shape, c.start, c.n, q.data(), stride, kv.data(), o1.data(), &scratch);
    avx2->causal_attention(c.shape, c.start, c.n, q.data(), stride, kv.data(), o2.data(), &scratch);
    EXPECT_TRUE(SameBits(o1.data(), o2.data(), o1.size()))
        << "hd=" << c.shape.head_dim << " start=" << c.start << " n=" << c.n;
    bool nonzero = false;
    for (float f : o1) nonzero |= f != 0.0f;
    EXPECT_TRUE(nonzero);
  }
}

// Sets DUALPATH_MODEL_ISA for the scope (tests run on one thread here) and restores it.
class ScopedIsa {
 public:
  explicit ScopedIsa(const char* value) {
    if (const char* old = std::getenv(kIsaEnvVar)) old_ = old;
    setenv(kIsaEnvVar, value, 1);
  }
  ~ScopedIsa() {
    if (old_) {
      setenv(kIsaEnvVar, old_->c_str(), 1);
    } else {
      unsetenv(kIsaEnvVar);
    }
  }

 private:
  std::optional<std::string> old_;
};

std::unique_ptr<RefModel> ModelOn(const char* isa, const RefModelConfig& c) {
  ScopedIsa scoped(isa);
  auto m = testing::MakeModel(c);
  if (m != nullptr) {
    EXPECT_EQ(m->isa(), isa);
  }
  return m;
}

TEST(Avx2Model, BadIsaRequestFailsCreate) {
  ScopedIsa scoped("sse9");
  auto m = RefModel::Create(testing::SmallGqa());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
}

TEST(Avx2Model, WholeModelKvLogitsAndTokensAreBitIdentical) {
  if (Avx2OrNull() == nullptr) GTEST_SKIP() << "this CPU has no AVX2 path";
  RefModelConfig def;  // the default spec, with fewer layers to stay quick under ASan
  def.layers = 2;
  for (const RefModelConfig& c : {testing::SmallGqa(), testing::OddMha(), def}) {
    auto base = ModelOn("baseline", c);
    auto avx2 = ModelOn("avx2", c);
    ASSERT_NE(base, nullptr);
    ASSERT_NE(avx2, nullptr);
    const auto tokens = testing::RandomTokens(70, c.vocab, 3);
    const auto one = testing::PrefillOneCall(*base, tokens);
    const auto two = testing::PrefillOneCall(*avx2, tokens);
    ASSERT_EQ(one.kv.size(), two.kv.size());
    EXPECT_EQ(std::memcmp(one.kv.data(), two.kv.data(), one.kv.size()), 0) << c.ToString();
    EXPECT_TRUE(SameBits(one.logits.data(), two.logits.data(), one.logits.size()));
    // A chunked AVX2 prefill equals the one-call baseline prefill too (both properties at once).
    const std::vector<size_t> chunks = {1, 15, 17, 30, 7};
    testing::PrefillResult chunked;
    testing::PrefillChunks(*avx2, tokens, chunks, 0, /*exact_spans=*/true, &chunked);
    EXPECT_EQ(std::memcmp(one.kv.data(), chunked.kv.data(), one.kv.size()), 0);
    EXPECT_TRUE(SameBits(one.logits.data(), chunked.logits.data(), one.logits.size()));

    // Teacher-forced generation: same tokens and first-logits digest.
    const auto teacher = testing::RandomTokens(8, c.vocab, 4);
    const std::span<const uint32_t> prompt(tokens.data(), 40);
    EXPECT_EQ(Reference(*base, prompt, teacher, 9), Reference(*avx2, prompt, teacher, 9));
  }
}

}  // namespace
}  // namespace dualpath::model::internal
