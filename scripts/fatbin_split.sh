# Sourced by scripts/build-kernels.sh and scripts/build-fused.sh: splits the fatbin nvcc writes into one fatbin per
# entry, byte for byte (scripts/fatbin.sh joins the norm images again).
#
# A fatbin is a 16-byte header {u32 magic 0xBA55ED50, u16 version 1, u16 header size 16, u64 size of what follows}
# and its entries. Entry header: u16 kind (1 PTX, 2 SASS) at +0, u32 header size at +4, u64 payload size at +8, u32
# arch at +28. Each piece is a fatbin header of its own, then the entry's header and payload unchanged (still
# compressed: the driver inflates it).

# le BYTES VALUE: VALUE as BYTES little-endian bytes (printf escapes).
le() {
  local n=$1 v=$2 i
  for ((i = 0; i < n; i++)); do printf '\\x%02x' $(((v >> (8 * i)) & 255)); done
}
# u FILE OFFSET BYTES: the unsigned little-endian integer at OFFSET.
u() { od -An -t "u$3" -j "$2" -N "$3" "$1" | tr -d ' '; }

# split_fatbin FATBIN OUTDIR PREFIX EXPECTED: writes OUTDIR/PREFIX_sm<arch>.fatbin per SASS entry and
# OUTDIR/PREFIX_compute<arch>.fatbin per PTX entry; fails (exit 1) unless the pieces written are EXPECTED, a
# space-separated list of their names in the fatbin's order.
split_fatbin() {
  local f=$1 out=$2 prefix=$3 expected=$4 total off end kind ehs size arch name seen=""
  [[ "$(u "$f" 0 4)" == $((0xBA55ED50)) && "$(u "$f" 6 2)" == 16 ]] || { echo "split_fatbin: $f: not a fatbin" >&2; exit 1; }
  total=$(stat -c %s "$f")
  end=$((16 + $(u "$f" 8 8)))
  ((end == total)) || { echo "split_fatbin: $f: size field $end != file size $total" >&2; exit 1; }
  off=16
  while ((off < end)); do
    kind=$(u "$f" "$off" 2); ehs=$(u "$f" $((off + 4)) 4); size=$(u "$f" $((off + 8)) 8); arch=$(u "$f" $((off + 28)) 4)
    case "$kind" in
      1) name="${prefix}_compute${arch}.fatbin" ;;
      2) name="${prefix}_sm${arch}.fatbin" ;;
      *) echo "split_fatbin: $f: entry of kind $kind at $off" >&2; exit 1 ;;
    esac
    {
      printf "$(le 4 $((0xBA55ED50)))$(le 2 1)$(le 2 16)$(le 8 $((ehs + size)))"
      dd if="$f" iflag=skip_bytes,count_bytes skip="$off" count=$((ehs + size)) bs=1M status=none
    } >"$out/$name"
    seen+="${seen:+ }$name"
    off=$((off + ehs + size))
  done
  [[ "$seen" == "$expected" ]] || { echo "split_fatbin: $f holds $seen (expected $expected, in that order)" >&2; exit 1; }
}
