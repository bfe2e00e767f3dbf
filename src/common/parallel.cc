#include "dualpath/common/parallel.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace dualpath {

size_t ThreadsForIdleCpus(size_t wanted, size_t cpus, size_t runnable) {
  if (wanted <= 1) return 1;
  // `runnable` counts the caller, which is running: the idle CPUs are the rest.
  const size_t busy = runnable == 0 ? 1 : runnable;
  const size_t idle = cpus > busy ? cpus - busy : 0;
  return std::min(wanted, 1 + idle);
}

size_t ThreadsForIdleCpus(size_t wanted) {
  if (wanted <= 1) return 1;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  // "0.52 0.58 0.59 3/1234 5678": the fourth field is runnable / all scheduling entities.
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || cpus <= 0) {
    if (fd >= 0) ::close(fd);
    return wanted;
  }
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return wanted;
  buf[n] = '\0';
  double l1 = 0, l5 = 0, l15 = 0;
  unsigned long runnable = 0, all = 0;
  if (std::sscanf(buf, "%lf %lf %lf %lu/%lu", &l1, &l5, &l15, &runnable, &all) != 5) {
    return wanted;
  }
  return ThreadsForIdleCpus(wanted, static_cast<size_t>(cpus), runnable);
}

}  // namespace dualpath
