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
