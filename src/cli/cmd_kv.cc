// `dualpath kv ...`: the KV block model from the command line.
//
//   dualpath kv hash --seed S --block-size N [--algo sha256_cbor|xxh3]  < tokens
//       one lowercase hex block hash per full block (vLLM sha256_cbor compatible by default)
//   dualpath kv models [NAME|FILE.json ...]
//       the model presets (or the named models) with their KV bytes per token
//   dualpath kv inspect FILE [--model M] [--hash HEX]
//       decodes and verifies a Full Block file's header (and payload when --model/--hash given)
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli/command.h"
#include "dualpath/common/file.h"
#include "dualpath/common/numeric.h"
#include "dualpath/kv/block_file.h"
#include "dualpath/kv/hasher.h"
#include "dualpath/kv/model.h"

namespace dualpath::cli {
namespace {

struct HashArgs {
  std::string seed;
  int64_t block_size = 0;
  std::string algo = "sha256_cbor";
};

// Token ids as text from `in`, bounded: stdin may be /dev/zero or /dev/urandom, which never end.
// Bytes that cannot be in a list of ids (NUL, control characters, non-ASCII) stop the read at
// once; the 1 GiB cap bounds an endless stream of plausible text.
Result<std::string> ReadTokenText(std::FILE* in) {
  constexpr size_t kMaxBytes = size_t{1} << 30;
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) {
    for (size_t i = 0; i < n; ++i) {
      const unsigned char c = static_cast<unsigned char>(buf[i]);
      if ((c < 0x20 && !std::isspace(c)) || c >= 0x7f) {
        char shown[8];
        std::snprintf(shown, sizeof(shown), "0x%02x", c);
        return Status(Code::kKvBadToken, std::string("byte ") + shown + " at offset " +
                                             std::to_string(text.size() + i) +
                                             " is not text: want token ids");
      }
    }
    if (text.size() + n > kMaxBytes) {
      return InvalidArgument("more than " + std::to_string(kMaxBytes) + " bytes of token ids");
    }
    text.append(buf, n);
  }
  if (std::ferror(in)) return IoError("read", errno);
  return text;
}

int RunHash(const HashArgs& a) {
  // docs/kv.md "Input ranges"; a signed flag is checked as a double so a negative prints as given.
  if (Status st = CheckRange("--block-size", static_cast<double>(a.block_size), 1,
                             kv::kMaxBlockSize, "tokens");
      !st.ok()) {
    return ReportError("kv hash", st);
  }
  Result<kv::HashAlgo> algo = kv::ParseHashAlgo(a.algo);
  if (!algo.ok()) return ReportError("kv hash: --algo", algo.status());
  Result<kv::BlockHasher> hasher =
      kv::BlockHasher::Create(*algo, a.seed, static_cast<uint32_t>(a.block_size));
  if (!hasher.ok()) return ReportError("kv hash", hasher.status());

  Result<std::string> input = ReadTokenText(stdin);
  if (!input.ok()) return ReportError("kv hash: stdin", input.status());
  Result<std::vector<kv::TokenId>> tokens = kv::ParseTokenIds(*input);
  if (!tokens.ok()) return ReportError("kv hash: stdin", tokens.status());

  std::vector<kv::BlockHash> hashes = hasher->HashPrefix(*tokens);
  std::string out;
  out.reserve(hashes.size() * 65);
  for (const kv::BlockHash& h : hashes) {
    out += h.Hex();
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : ReportError("kv hash", IoError("write stdout"));
}

// A model the user named that cannot be resolved (unknown preset, missing or malformed JSON file)
// is bad input: exit status 2 even for kNotFound, which IsBadInput leaves at 1 for runtime I/O.
int ReportModelError(std::string_view what, const Status& status) {
  const int code = ReportError(what, status);
  return status.code() == Code::kNotFound || status.code() == Code::kPermissionDenied
             ? kExitBadInput
             : code;
}

std::string HumanBytes(double b) {
  char buf[32];
  if (b >= 1 << 20) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1 << 20));
  } else if (b >= 1 << 10) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / (1 << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  }
  return buf;
}

int RunModels(const std::vector<std::string>& names) {
  std::vector<kv::ModelGeometry> models;
  if (names.empty()) {
    models = kv::ModelPresets();
  }
  for (const std::string& n : names) {
    Result<kv::ModelGeometry> m = kv::ResolveModel(n);
    if (!m.ok()) return ReportModelError("kv models", m.status());
    models.push_back(*m);
  }
  std::printf("%-12s %6s %4s %5s %10s %12s %12s %9s  %s\n", "name", "layers", "attn", "dtype",
              "kv_B/tok/L", "kv_B/token", "kv/token", "active_B", "model");
  for (const kv::ModelGeometry& m : models) {
    std::printf("%-12s %6u %4s %5s %10llu %12llu %12s %9.2f  %s\n", m.name.c_str(), m.num_layers,
                std::string(kv::AttentionKindName(m.attention)).c_str(),
                std::string(kv::KvDtypeName(m.kv_dtype)).c_str(),
                static_cast<unsigned long long>(m.kv_bytes_per_token_per_layer),
                static_cast<unsigned long long>(m.KvBytesPerToken()),
                HumanBytes(static_cast<double>(m.KvBytesPerToken())).c_str(), m.params_active / 1e9,
                m.display_name.c_str());
  }
  return kExitOk;
}

struct InspectArgs {
  std::string path;
  std::string model;
  std::string hash;
};

int RunInspect(const InspectArgs& a) {
  // Arguments first, so bad input is reported before anything is printed.
  std::optional<kv::BlockHash> want_hash;
  if (!a.hash.empty()) {
    Result<kv::BlockHash> h = kv::BlockHash::FromHex(a.hash);
    if (!h.ok()) return ReportError("kv inspect: --hash", h.status());
    want_hash = *h;
  }
  std::optional<uint64_t> want_fingerprint;
  if (!a.model.empty()) {
    Result<kv::ModelGeometry> m = kv::ResolveModel(a.model);
    if (!m.ok()) return ReportModelError("kv inspect: --model", m.status());
    want_fingerprint = kv::ModelFingerprint(*m);
  }
  Result<std::string> file = ReadRegularFile(a.path, "block file");
  // A path the user named that is missing or unreadable is bad input too (exit 2).
  if (!file.ok()) return ReportModelError("kv inspect", file.status());
  const std::string& data = *file;
  auto bytes = std::as_bytes(std::span<const char>(data));
  Result<kv::BlockFileMeta> meta = kv::DecodeBlockFileHeader(bytes);
  if (!meta.ok()) return ReportError("kv inspect " + a.path, meta.status());
  std::printf(
      "block_hash %s\nfingerprint %016llx\ntokens %u\nlayers %u\nbytes_per_token_per_layer %llu\n"
      "payload_bytes %llu\nfile_bytes %zu\n",
      meta->block_hash.Hex().c_str(), static_cast<unsigned long long>(meta->model_fingerprint),
      meta->token_count, meta->num_layers,
      static_cast<unsigned long long>(meta->bytes_per_token_per_layer),
      static_cast<unsigned long long>(meta->PayloadBytes()), data.size());
  const uint64_t fingerprint = want_fingerprint.value_or(meta->model_fingerprint);
  const kv::BlockHash want = want_hash.value_or(meta->block_hash);
  Result<kv::DecodedBlockFile> decoded = kv::DecodeBlockFile(bytes, fingerprint, want);
  if (!decoded.ok()) {
    // A corrupt block is the answer to the question asked, not a usage error: exit 1.
    std::cerr << "dualpath kv inspect " << a.path << ": " << decoded.status().ToString() << "\n";
    return kExitFailure;
  }
  std::printf("verified ok\n");
  return kExitOk;
}

void Register(CLI::App& root, int* exit_code) {
  CLI::App* kv = root.add_subcommand("kv", "KV block model: hashing, model presets, block files");
  kv->require_subcommand(1);

  auto hash_args = std::make_shared<HashArgs>();
  CLI::App* hash = kv->add_subcommand(
      "hash",
      "Read token ids (whitespace/comma separated) on stdin; print one hash per full block");
  hash->add_option("--seed", hash_args->seed,
                   "Hash seed (vLLM: the PYTHONHASHSEED string, e.g. 0 or 42)")
      ->required();
  hash->add_option("--block-size", hash_args->block_size,
                   "Tokens per block (16 vLLM, 64 DualPath, 256 LMCache, 512 Mooncake)")
      ->required();
  hash->add_option("--algo", hash_args->algo,
                   "sha256_cbor (vLLM-compatible, default) or xxh3 (fast, internal only)");
  hash->callback([hash_args, exit_code] { *exit_code = RunHash(*hash_args); });

  auto model_names = std::make_shared<std::vector<std::string>>();
  CLI::App* models = kv->add_subcommand("models", "List model presets with KV bytes per token");
  models->add_option("models", *model_names, "Preset names/aliases or model .json files");
  models->callback([model_names, exit_code] { *exit_code = RunModels(*model_names); });

  auto inspect_args = std::make_shared<InspectArgs>();
  CLI::App* inspect = kv->add_subcommand("inspect", "Decode and verify a Full Block file");
  inspect->add_option("file", inspect_args->path, "Block file")->required();
  inspect->add_option("--model", inspect_args->model, "Expected model (preset or .json)");
  inspect->add_option("--hash", inspect_args->hash, "Expected block hash (64 hex)");
  inspect->callback([inspect_args, exit_code] { *exit_code = RunInspect(*inspect_args); });
}

DUALPATH_CLI_COMMAND(Register);

}  // namespace
}  // namespace dualpath::cli
