#!/usr/bin/env python3
"""nf4_rcp_pack.py: packs the exception list that `qlt_gpu_check nf4_rcp` writes (where the GPU's
rcp.approx.ftz.f32 differs from the correctly rounded 1/x, by input mantissa: entries (mantissa << 8) |
delta_ulps) into src/nf4/nf4_rcp_table.c: a 2-bit code per mantissa (0: correctly rounded, 1: +1 ulp,
2: -1 ulp), 2^23 codes = 2 MiB, zlib-compressed (about 150 KB) and inflated once on first use.

    python3 scripts/nf4_rcp_pack.py OUT_DIR/nf4_rcp_table.c src/nf4/nf4_rcp_table.c
"""
import re
import sys
import zlib


def main():
    src, dst = sys.argv[1], sys.argv[2]
    entries = [int(x, 16) for x in re.findall(r"0x([0-9a-f]+)u", open(src).read())]
    bitmap = bytearray(1 << 21)
    for e in entries:
        mant, delta = e >> 8, e & 0xFF
        if delta not in (1, 255):
            sys.exit(f"mantissa {mant:#x}: delta {delta} ulps is outside +-1 (the 2-bit map holds +-1)")
        bitmap[mant >> 2] |= (1 if delta == 1 else 2) << ((mant & 3) * 2)
    packed = zlib.compress(bytes(bitmap), 9)
    with open(dst, "w") as f:
        f.write("/* nf4_rcp_table.c: where the GPU's rcp.approx.ftz.f32 (the instruction bitsandbytes' fast-math\n"
                " * kernels use for 1/absmax) differs from the correctly rounded 1.0f/x, so qlt_nf4_bnb_rcp\n"
                " * reproduces it on the host. The result depends only on the input's mantissa; per mantissa a\n"
                " * 2-bit code (0: correctly rounded, 1: one ulp up, 2: one ulp down), 2^23 codes, zlib-compressed.\n"
                f" * {len(entries)} exceptions, measured on an NVIDIA H100 (sm_90) by `qlt_gpu_check nf4_rcp` and\n"
                " * packed by scripts/nf4_rcp_pack.py. Generated: do not edit. */\n"
                "#include <stddef.h>\n\n"
                f"const size_t qlt_nf4_rcp_map_bytes = {len(bitmap)};\n"
                f"const size_t qlt_nf4_rcp_map_z_len = {len(packed)};\n"
                "const unsigned char qlt_nf4_rcp_map_z[] = {\n")
        for i in range(0, len(packed), 24):
            f.write("    " + ",".join(str(b) for b in packed[i:i + 24]) + ",\n")
        f.write("};\n")
    print(f"{len(entries)} exceptions -> {len(packed)} compressed bytes in {dst}")


if __name__ == "__main__":
    main()
