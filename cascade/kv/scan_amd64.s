#include "textflag.h"

// func headMaskPOPCNT(heads *[128]uint64, s0, s1 uint64, cutoff int) uint64
// Without a branch (~2 % of real questions' first halves pass): d-cutoff-1 is negative, its top
// bit set, exactly when d <= cutoff.
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
	MOVQ    8(SI), R10
	XORQ    R9, R10
	POPCNTQ R10, R10
	ADDQ    R10, BX
	SUBQ    DX, BX
	SHRQ    $63, BX
	SHLQ    CX, BX
	ORQ     BX, AX
	ADDQ    $16, SI
	INCQ    CX
	CMPQ    CX, $64
	JLT     head
	MOVQ    AX, ret+32(FP)
	RET

// Lane indices that gather the first and the second words of eight first halves held in two
// registers (VPERMI2Q), in slot order.
DATA evens<>+0(SB)/8, $0
DATA evens<>+8(SB)/8, $2
DATA evens<>+16(SB)/8, $4
DATA evens<>+24(SB)/8, $6
DATA evens<>+32(SB)/8, $8
DATA evens<>+40(SB)/8, $10
DATA evens<>+48(SB)/8, $12
DATA evens<>+56(SB)/8, $14
GLOBL evens<>(SB), RODATA|NOPTR, $64
DATA odds<>+0(SB)/8, $1
DATA odds<>+8(SB)/8, $3
DATA odds<>+16(SB)/8, $5
DATA odds<>+24(SB)/8, $7
DATA odds<>+32(SB)/8, $9
DATA odds<>+40(SB)/8, $11
DATA odds<>+48(SB)/8, $13
DATA odds<>+56(SB)/8, $15
GLOBL odds<>(SB), RODATA|NOPTR, $64

// func headMaskAVX512(heads *[128]uint64, s0, s1 uint64, cutoff int) uint64
// Eight first halves two registers: XOR with the query's, count each word, gather the first and
// the second words in slot order and add them, compare with the cutoff.
TEXT ·headMaskAVX512(SB), NOSPLIT, $0-40
	MOVQ         heads+0(FP), SI
	VPBROADCASTQ s0+8(FP), Z15
	VPBROADCASTQ s1+16(FP), Z13
	VPUNPCKLQDQ  Z13, Z15, Z15
	VPBROADCASTQ cutoff+24(FP), Z14
	VMOVDQU64    evens<>(SB), Z12
	VMOVDQU64    odds<>(SB), Z11
	XORQ         AX, AX
	XORQ         CX, CX

eight:
	VPXORQ    (SI), Z15, Z0
	VPXORQ    64(SI), Z15, Z1
	VPOPCNTQ  Z0, Z0
	VPOPCNTQ  Z1, Z1
	VMOVDQA64 Z12, Z2
	VPERMI2Q  Z1, Z0, Z2
	VMOVDQA64 Z11, Z3
	VPERMI2Q  Z1, Z0, Z3
	VPADDQ    Z3, Z2, Z2
	VPCMPUQ   $2, Z14, Z2, K1
	KMOVW     K1, BX
	SHLQ      CX, BX
	ORQ       BX, AX
	ADDQ      $128, SI
	ADDQ      $8, CX
	CMPQ      CX, $64
	JLT       eight
	VZEROUPPER
	MOVQ      AX, ret+32(FP)
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
