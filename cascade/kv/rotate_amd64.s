#include "textflag.h"

// func flipFWHTAVX2(x, signs *float32, n int)
// x[i] *= signs[i] for i < n, then the unnormalised Walsh-Hadamard transform of x as fwht
// computes it (a+b and a-b for each pair, the same additions in the same order, eight pairs an
// instruction). n is a power of two, at least 16.
TEXT ·flipFWHTAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), DI
	MOVQ signs+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX // n in bytes
	XORQ AX, AX

	// The sign flips and the first three levels (pairs 1, 2 and 4 apart), eight floats a
	// register: each level adds the register and its pairs' floats swapped in, subtracts, and
	// blends the sums into the lower of each pair and the differences into the upper.
low:
	VMOVUPS    (DI)(AX*1), Y0
	VMULPS     (SI)(AX*1), Y0, Y0
	VPERMILPS  $0xB1, Y0, Y1
	VADDPS     Y1, Y0, Y2
	VSUBPS     Y0, Y1, Y3
	VBLENDPS   $0xAA, Y3, Y2, Y0
	VPERMILPS  $0x4E, Y0, Y1
	VADDPS     Y1, Y0, Y2
	VSUBPS     Y0, Y1, Y3
	VBLENDPS   $0xCC, Y3, Y2, Y0
	VPERM2F128 $0x01, Y0, Y0, Y1
	VADDPS     Y1, Y0, Y2
	VSUBPS     Y0, Y1, Y3
	VBLENDPS   $0xF0, Y3, Y2, Y0
	VMOVUPS    Y0, (DI)(AX*1)
	ADDQ       $32, AX
	CMPQ       AX, CX
	JLT        low

	// The other levels, two at a time (pairs h and 2h apart, h = 8, 32, ... floats: the same
	// additions in the same order as one level at a time), then one alone if one is left.
	// BX: h in bytes; R12: 2h, R13: 3h.
	MOVQ $32, BX

level4:
	LEAQ (BX*4), R12
	CMPQ R12, CX
	JGT  level2
	LEAQ (BX*2), R12
	LEAQ (R12)(BX*1), R13
	XORQ R8, R8 // the block of 4h floats

block4:
	LEAQ (DI)(R8*1), R9
	MOVQ BX, R11

quad:
	VMOVUPS (R9), Y0
	VMOVUPS (R9)(BX*1), Y1
	VMOVUPS (R9)(R12*1), Y2
	VMOVUPS (R9)(R13*1), Y3
	VADDPS  Y1, Y0, Y4 // p0 = a+b
	VSUBPS  Y1, Y0, Y5 // p1 = a-b
	VADDPS  Y3, Y2, Y6 // p2 = c+d
	VSUBPS  Y3, Y2, Y7 // p3 = c-d
	VADDPS  Y6, Y4, Y0
	VADDPS  Y7, Y5, Y1
	VSUBPS  Y6, Y4, Y2
	VSUBPS  Y7, Y5, Y3
	VMOVUPS Y0, (R9)
	VMOVUPS Y1, (R9)(BX*1)
	VMOVUPS Y2, (R9)(R12*1)
	VMOVUPS Y3, (R9)(R13*1)
	ADDQ    $32, R9
	SUBQ    $32, R11
	JNZ     quad
	LEAQ    (R8)(BX*4), R8
	CMPQ    R8, CX
	JLT     block4
	SHLQ    $2, BX
	JMP     level4

level2:
	CMPQ BX, CX
	JGE  done
	MOVQ DI, R9
	MOVQ BX, R11

pair:
	VMOVUPS (R9), Y0
	VMOVUPS (R9)(BX*1), Y1
	VADDPS  Y1, Y0, Y2
	VSUBPS  Y1, Y0, Y3
	VMOVUPS Y2, (R9)
	VMOVUPS Y3, (R9)(BX*1)
	ADDQ    $32, R9
	SUBQ    $32, R11
	JNZ     pair

done:
	VZEROUPPER
	RET

// func signsAVX2(x *float32, s *sketch)
// Bit k of s is x[k] >= 0 (as Go compares: true for -0, false for NaN), for k < 256.
TEXT ·signsAVX2(SB), NOSPLIT, $0-16
	MOVQ   x+0(FP), SI
	MOVQ   s+8(FP), DI
	VXORPS Y15, Y15, Y15
	XORQ   R8, R8 // the word

word:
	XORQ AX, AX
	XORQ CX, CX // the shift

eight:
	VMOVUPS   (SI), Y0
	VCMPPS    $0x1d, Y15, Y0, Y1 // GE, ordered, quiet
	VMOVMSKPS Y1, BX
	SHLQ      CX, BX
	ORQ       BX, AX
	ADDQ      $32, SI
	ADDQ      $8, CX
	CMPQ      CX, $64
	JLT       eight
	MOVQ      AX, (DI)(R8*8)
	INCQ      R8
	CMPQ      R8, $4
	JLT       word
	VZEROUPPER
	RET
