#include "dualpath/transfer/types.h"

namespace dualpath::transfer {

std::string_view ClassName(TrafficClass c) { return c == TrafficClass::kHigh ? "high" : "low"; }

std::string_view OpName(Op op) { return op == Op::kPut ? "put" : "get"; }

}  // namespace dualpath::transfer
