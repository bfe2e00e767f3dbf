#include <gtest/gtest.h>

namespace dualpath::sched {
namespace {}  // namespace
}  // namespace dualpath::sched
