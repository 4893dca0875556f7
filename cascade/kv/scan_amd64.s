#include "textflag.h"

// func nearMaskPOPCNT(block *[256]uint64, sk *sketch, cutoff int) uint64
TEXT ·nearMaskPOPCNT(SB), NOSPLIT, $0-32
	MOVQ block+0(FP), SI
	MOVQ sk+8(FP), DI
	MOVQ cutoff+16(FP), DX
	MOVQ 0(DI), R8
	MOVQ 8(DI), R9
	MOVQ 16(DI), R10
	MOVQ 24(DI), R11
	XORQ AX, AX
	XORQ CX, CX

loop:
	MOVQ    0(SI), BX
	XORQ    R8, BX
	POPCNTQ BX, BX
	MOVQ    8(SI), R12
	XORQ    R9, R12
	POPCNTQ R12, R12
	ADDQ    R12, BX
	MOVQ    16(SI), R12
	XORQ    R10, R12
	POPCNTQ R12, R12
	ADDQ    R12, BX
	MOVQ    24(SI), R12
	XORQ    R11, R12
	POPCNTQ R12, R12
	ADDQ    R12, BX
	CMPQ    BX, DX
	JHI     far
	BTSQ    CX, AX

far:
	ADDQ $32, SI
	INCQ CX
	CMPQ CX, $64
	JLT  loop
	MOVQ AX, ret+24(FP)
	RET

// func nearMaskAVX512(block *[256]uint64, sk *sketch, cutoff int) uint64
// Two sketches a 512-bit register: XOR with the query twice over, count each word, add the four
// words of each sketch across the register (within 128-bit lanes, then across pairs of lanes),
// compare with the cutoff. A sketch within it is rare: the mask is read only when one is.
TEXT ·nearMaskAVX512(SB), NOSPLIT, $0-32
	MOVQ            block+0(FP), SI
	MOVQ            sk+8(FP), DI
	MOVQ            cutoff+16(FP), DX
	VBROADCASTI64X4 (DI), Z15
	VPBROADCASTQ    DX, Z14
	XORQ            AX, AX
	XORQ            CX, CX

pair:
	VPXORQ     (SI), Z15, Z0
	VPOPCNTQ   Z0, Z0
	VPSHUFD    $0x4e, Z0, Z1
	VPADDQ     Z1, Z0, Z0
	VSHUFI64X2 $0xb1, Z0, Z0, Z1
	VPADDQ     Z1, Z0, Z0
	VPCMPUQ    $2, Z14, Z0, K1
	KORTESTW   K1, K1
	JZ         next
	KMOVW      K1, BX
	TESTQ      $1, BX
	JZ         second
	BTSQ       CX, AX

second:
	TESTQ $16, BX
	JZ    next
	LEAQ  1(CX), R8
	BTSQ  R8, AX

next:
	ADDQ $64, SI
	ADDQ $2, CX
	CMPQ CX, $64
	JLT  pair
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
