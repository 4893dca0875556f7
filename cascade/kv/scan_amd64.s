#include "textflag.h"

// func headMaskPOPCNT(heads *[128]uint64, s0, s1 uint64, cutoff int) uint64
// Slot i's first words are heads[i] and heads[64+i]. Without a branch (~2 % of real
// questions' first halves pass): d-cutoff-1 is negative, its top bit set, exactly when
// d <= cutoff.
TEXT ·headMaskPOPCNT(SB), NOSPLIT, $0-40
	MOVQ heads+0(FP), SI
	MOVQ s0+8(FP), R8
	MOVQ s1+16(FP), R9
	MOVQ cutoff+24(FP), DX
	INCQ DX
	XORQ AX, AX
	XORQ CX, CX

head:
	MOVQ    0(SI), BX
	XORQ    R8, BX
	POPCNTQ BX, BX
	MOVQ    512(SI), R10
	XORQ    R9, R10
	POPCNTQ R10, R10
	ADDQ    R10, BX
	SUBQ    DX, BX
	SHRQ    $63, BX
	SHLQ    CX, BX
	ORQ     BX, AX
	ADDQ    $8, SI
	INCQ    CX
	CMPQ    CX, $64
	JLT     head
	MOVQ    AX, ret+32(FP)
	RET

// func headMaskAVX512(heads *[128]uint64, s0, s1 uint64, cutoff int) uint64
// Eight slots a step: their first words in one register, their second in another, each XORed
// with the query's and counted; the sums compared with the cutoff.
TEXT ·headMaskAVX512(SB), NOSPLIT, $0-40
	MOVQ         heads+0(FP), SI
	VPBROADCASTQ s0+8(FP), Z15
	VPBROADCASTQ s1+16(FP), Z13
	VPBROADCASTQ cutoff+24(FP), Z14
	XORQ         AX, AX
	XORQ         CX, CX

eight:
	VPXORQ   (SI), Z15, Z0
	VPXORQ   512(SI), Z13, Z1
	VPOPCNTQ Z0, Z0
	VPOPCNTQ Z1, Z1
	VPADDQ   Z1, Z0, Z2
	VPCMPUQ  $2, Z14, Z2, K1
	KMOVW    K1, BX
	SHLQ     CX, BX
	ORQ      BX, AX
	ADDQ     $64, SI
	ADDQ     $8, CX
	CMPQ     CX, $64
	JLT      eight
	VZEROUPPER
	MOVQ     AX, ret+32(FP)
	RET

// func fullMaskPOPCNT(block *[256]uint64, sk *sketch, cutoff int, m uint64) uint64
// For each bit of m, the whole sketch's distance; the bit is cleared when it is beyond cutoff.
TEXT ·fullMaskPOPCNT(SB), NOSPLIT, $0-40
	MOVQ block+0(FP), SI
	MOVQ sk+8(FP), DI
	MOVQ cutoff+16(FP), DX
	MOVQ m+24(FP), AX
	MOVQ AX, R13
	MOVQ 0(DI), R8
	MOVQ 8(DI), R9
	MOVQ 16(DI), R10
	MOVQ 24(DI), R11

slot:
	TESTQ   AX, AX
	JZ      done
	BSFQ    AX, CX
	BTRQ    CX, AX
	MOVQ    CX, R12
	SHLQ    $5, R12
	MOVQ    0(SI)(R12*1), BX
	XORQ    R8, BX
	POPCNTQ BX, BX
	MOVQ    8(SI)(R12*1), DI
	XORQ    R9, DI
	POPCNTQ DI, DI
	ADDQ    DI, BX
	MOVQ    16(SI)(R12*1), DI
	XORQ    R10, DI
	POPCNTQ DI, DI
	ADDQ    DI, BX
	MOVQ    24(SI)(R12*1), DI
	XORQ    R11, DI
	POPCNTQ DI, DI
	ADDQ    DI, BX
	CMPQ    BX, DX
	JLS     slot
	BTRQ    CX, R13
	JMP     slot

done:
	MOVQ R13, ret+32(FP)
	RET
