# Sourced by system tests that need a small file system that fills up (issue 19's no-space
# tests): `small_tmpfs NAME SIZE` skips the test (exit 77) without root or when the mount fails,
# else mounts a tmpfs of SIZE at $mnt inside a fresh $dir, and unmounts and removes both on exit.
small_tmpfs() {
  local name=$1 size=$2
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: needs root to mount a tmpfs"
    exit 77
  fi
  dir=$(mktemp -d "/var/tmp/$name.XXXXXX")
  mnt=$dir/mnt
  trap 'mountpoint -q "$mnt" && umount -l "$mnt"; rm -rf "$dir"' EXIT
  mkdir "$mnt"
  if ! mount -t tmpfs -o "size=$size" "$name" "$mnt"; then
    echo "SKIP: cannot mount a tmpfs"
    exit 77
  fi
}
