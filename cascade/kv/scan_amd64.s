#include "textflag.h"

// func blockMaskPOPCNT(block *[256]uint64, sk *sketch, head, full int) uint64
// Slot i's words are block[i], block[64+i], block[128+i] and block[192+i]. The first two are
// counted for every slot; the last two only for a slot within the head cutoff (a few in a
// hundred of real questions').
TEXT ·blockMaskPOPCNT(SB), NOSPLIT, $0-40
	MOVQ block+0(FP), SI
	MOVQ sk+8(FP), DI
	MOVQ head+16(FP), DX
	MOVQ full+24(FP), R13
	MOVQ 0(DI), R8
	MOVQ 8(DI), R9
	MOVQ 16(DI), R10
	MOVQ 24(DI), R11
	XORQ AX, AX
	XORQ CX, CX

slot:
	MOVQ    0(SI), BX
	XORQ    R8, BX
	POPCNTQ BX, BX
	MOVQ    512(SI), R12
	XORQ    R9, R12
	POPCNTQ R12, R12
	ADDQ    R12, BX
	CMPQ    BX, DX
	JHI     next
	MOVQ    1024(SI), R12
	XORQ    R10, R12
	POPCNTQ R12, R12
	ADDQ    R12, BX
	MOVQ    1536(SI), R12
	XORQ    R11, R12
	POPCNTQ R12, R12
	ADDQ    R12, BX
	CMPQ    BX, R13
	JHI     next
	BTSQ    CX, AX

next:
	ADDQ $8, SI
	INCQ CX
	CMPQ CX, $64
	JLT  slot
	MOVQ AX, ret+32(FP)
	RET

// func blockMaskAVX512(block *[256]uint64, sk *sketch, head, full int) uint64
// Eight slots a step: each of their four words in a register, XORed with the query's and
// counted; the first two words' sum compared with head, the whole's with full.
TEXT ·blockMaskAVX512(SB), NOSPLIT, $0-40
	MOVQ         block+0(FP), SI
	MOVQ         sk+8(FP), DI
	VPBROADCASTQ 0(DI), Z10
	VPBROADCASTQ 8(DI), Z11
	VPBROADCASTQ 16(DI), Z12
	VPBROADCASTQ 24(DI), Z13
	VPBROADCASTQ head+16(FP), Z14
	VPBROADCASTQ full+24(FP), Z15
	XORQ         AX, AX
	XORQ         CX, CX

eight:
	VPXORQ   (SI), Z10, Z0
	VPXORQ   512(SI), Z11, Z1
	VPXORQ   1024(SI), Z12, Z2
	VPXORQ   1536(SI), Z13, Z3
	VPOPCNTQ Z0, Z0
	VPOPCNTQ Z1, Z1
	VPOPCNTQ Z2, Z2
	VPOPCNTQ Z3, Z3
	VPADDQ   Z1, Z0, Z0
	VPADDQ   Z3, Z2, Z2
	VPADDQ   Z0, Z2, Z2
	VPCMPUQ  $2, Z14, Z0, K1
	VPCMPUQ  $2, Z15, Z2, K1, K2
	KMOVW    K2, BX
	SHLQ     CX, BX
	ORQ      BX, AX
	ADDQ     $64, SI
	ADDQ     $8, CX
	CMPQ     CX, $64
	JLT      eight
	VZEROUPPER
	MOVQ     AX, ret+32(FP)
	RET
