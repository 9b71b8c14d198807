; Hand-written IR for instructions and flags that clang and Numba rarely emit.
; It is normalised through llvmlite before the round-trip test reads it.

%struct.pair = type { i32, double }
%struct.packed = type <{ i8, i32, i16 }>
%struct.opaque = type opaque
%struct.list = type { ptr, [4 x float], <2 x double> }

@g = global i32 0, align 4
@gd = global double 0.0, align 8
@arr = global [4 x i32] [i32 1, i32 2, i32 3, i32 4], align 16

declare void @llvm.va_start.p0(ptr)
declare void @llvm.va_end.p0(ptr)
declare void @llvm.va_copy.p0(ptr, ptr)

define i32 @varargs_sum(i32 %n, ...) {
entry:
  %ap = alloca ptr, align 8
  %ap2 = alloca ptr, align 8
  call void @llvm.va_start.p0(ptr %ap)
  call void @llvm.va_copy.p0(ptr %ap2, ptr %ap)
  %a = va_arg ptr %ap, i32
  %b = va_arg ptr %ap, double
  %bi = fptosi double %b to i32
  %c = va_arg ptr %ap2, i64
  %ci = trunc nuw nsw i64 %c to i32
  call void @llvm.va_end.p0(ptr %ap2)
  call void @llvm.va_end.p0(ptr %ap)
  %s = add nuw nsw i32 %a, %bi
  %t = add i32 %s, %ci
  ret i32 %t
}

define i32 @flags(i32 %a, i32 %b, i8 %c, double %x, double %y) {
  %f = freeze i32 %a
  %or = or disjoint i32 %f, 1
  %sh = shl nuw nsw i32 %or, 2
  %lsh = lshr exact i32 %sh, 1
  %ash = ashr exact i32 %lsh, 1
  %div = sdiv exact i32 %ash, 3
  %udiv = udiv exact i32 %div, 1
  %z = zext nneg i8 %c to i32
  %cmp = icmp samesign ult i32 %udiv, %z
  %sel = select i1 %cmp, i32 %udiv, i32 %z
  %rem = frem double %x, %y
  %neg = fneg fast double %rem
  %fc = fcmp nnan ninf oge double %neg, %y
  %fs = select nsz i1 %fc, double %x, double %y
  %fm = fmul reassoc contract double %fs, %fs
  %fa = fadd afn arcp double %fm, 1.0
  %ui = uitofp nneg i32 %sel to double
  %sum = fadd double %ui, %fa
  %fi = fptoui double %sum to i32
  %ft = fptrunc double %sum to float
  %fe = fpext float %ft to double
  %back = fptosi double %fe to i32
  %r = add i32 %fi, %back
  %pt = inttoptr i32 %r to ptr
  %ip = ptrtoint ptr %pt to i64
  %tr = trunc i64 %ip to i32
  %bc = bitcast i32 %tr to float
  %bi = bitcast float %bc to i32
  ret i32 %bi
}

define i64 @odd_ints(i7 %a, i128 %b, i1 %c, i33 %d) {
  %w = zext i7 %a to i128
  %m = mul i128 %w, %b
  %h = lshr i128 %m, 64
  %t = trunc i128 %h to i64
  %e = sext i33 %d to i64
  %s = select i1 %c, i64 %t, i64 %e
  ret i64 %s
}

define float @fp_types(half %h, bfloat %b, fp128 %q, x86_fp80 %x, ppc_fp128 %p) {
  %hf = fpext half %h to float
  %bf = fpext bfloat %b to float
  %qf = fptrunc fp128 %q to float
  %xf = fptrunc x86_fp80 %x to float
  %pf = fptrunc ppc_fp128 %p to float
  %s1 = fadd float %hf, %bf
  %s2 = fadd float %qf, %xf
  %s3 = fadd float %s1, %s2
  %s4 = fadd float %s3, %pf
  %c1 = fadd float %s4, 0x7FF8000000000000
  %c2 = fadd half %h, 0xH3C00
  %c3 = fadd bfloat %b, 0xR3F80
  %c4 = fadd fp128 %q, 0xL00000000000000003FFF000000000000
  %c5 = fadd x86_fp80 %x, 0xK3FFF8000000000000000
  %u = fpext half %c2 to float
  %v = fadd float %c1, %u
  ret float %v
}

define void @atomics(ptr %p, ptr %q, float %f, i32 %v) {
  %1 = atomicrmw fadd ptr %q, float %f seq_cst, align 4
  %2 = atomicrmw fsub ptr %q, float %f acquire, align 4
  %3 = atomicrmw fmax ptr %q, float %f release, align 4
  %4 = atomicrmw fmin ptr %q, float %f acq_rel, align 4
  %5 = atomicrmw uinc_wrap ptr %p, i32 %v monotonic, align 4
  %6 = atomicrmw udec_wrap ptr %p, i32 %v monotonic, align 4
  %7 = atomicrmw nand ptr %p, i32 %v seq_cst, align 4
  %8 = atomicrmw umax ptr %p, i32 %v seq_cst, align 4
  %9 = atomicrmw umin ptr %p, i32 %v seq_cst, align 4
  %10 = atomicrmw volatile xchg ptr %q, float %f syncscope("singlethread") seq_cst, align 4
  %11 = atomicrmw usub_cond ptr %p, i32 %v seq_cst, align 4
  %12 = atomicrmw usub_sat ptr %p, i32 %v seq_cst, align 4
  %13 = cmpxchg weak volatile ptr %p, i32 %v, i32 0 syncscope("singlethread") acq_rel monotonic, align 4
  %14 = extractvalue { i32, i1 } %13, 1
  %15 = load atomic i32, ptr %p unordered, align 4
  %16 = load atomic volatile float, ptr %q syncscope("singlethread") acquire, align 4
  store atomic i32 %15, ptr %p release, align 4
  store atomic volatile float %16, ptr %q monotonic, align 4
  fence syncscope("singlethread") seq_cst
  fence acquire
  ret void
}

define ptr @geps(ptr %base, i64 %i, <2 x i64> %vi) {
  %a = getelementptr inbounds nuw %struct.pair, ptr %base, i64 %i, i32 1
  %b = getelementptr nusw i8, ptr %a, i64 -8
  %c = getelementptr inbounds %struct.list, ptr %b, i64 0, i32 1, i64 2
  %d = getelementptr %struct.packed, ptr %c, i64 1, i32 2
  %vp = getelementptr double, ptr %d, <2 x i64> %vi
  %e = extractelement <2 x ptr> %vp, i32 1
  %f = getelementptr inbounds [4 x i32], ptr @arr, i64 0, i64 %i
  %g = getelementptr i8, ptr %f, i64 ptrtoint (ptr getelementptr (i32, ptr null, i32 1) to i64)
  %cmp = icmp eq ptr %e, %g
  %r = select i1 %cmp, ptr %e, ptr getelementptr inbounds ([4 x i32], ptr @arr, i64 0, i64 2)
  ret ptr %r
}

define <4 x float> @vectors(<4 x float> %a, <4 x float> %b, <vscale x 4 x i32> %sv) {
  %s = shufflevector <4 x float> %a, <4 x float> %b, <4 x i32> <i32 0, i32 5, i32 poison, i32 7>
  %i = insertelement <4 x float> %s, float 1.0, i64 2
  %u = shufflevector <4 x float> %i, <4 x float> poison, <4 x i32> zeroinitializer
  %m = fmul <4 x float> %u, <float 1.0, float 2.0, float 3.0, float 4.0>
  %c = fcmp olt <4 x float> %m, zeroinitializer
  %r = select <4 x i1> %c, <4 x float> %a, <4 x float> %m
  %sv2 = add <vscale x 4 x i32> %sv, splat (i32 1)
  %e = extractelement <vscale x 4 x i32> %sv2, i64 0
  %ef = sitofp i32 %e to float
  %r2 = insertelement <4 x float> %r, float %ef, i32 3
  %spl = fadd <4 x float> %r2, splat (float 5.0e-01)
  ret <4 x float> %spl
}

define { i32, double } @aggregates(%struct.pair %p, [2 x i32] %a) {
  %x = extractvalue %struct.pair %p, 0
  %y = extractvalue [2 x i32] %a, 1
  %s = add i32 %x, %y
  %q = insertvalue { i32, double } undef, i32 %s, 0
  %d = extractvalue %struct.pair %p, 1
  %r = insertvalue { i32, double } %q, double %d, 1
  %pk = insertvalue %struct.packed <{ i8 1, i32 2, i16 3 }>, i8 7, 0
  ret { i32, double } %r
}

define i32 @indirect(i32 %k) {
entry:
  %addr = select i1 true, ptr blockaddress(@indirect, %one), ptr blockaddress(@indirect, %two)
  indirectbr ptr %addr, [label %one, label %two]
one:
  switch i32 %k, label %two [
    i32 0, label %done
    i32 5, label %one
  ]
two:
  br label %done
done:
  %r = phi i32 [ 1, %one ], [ 2, %two ]
  ret i32 %r
}

define i32 @unreachable_tail(i1 %c) {
  br i1 %c, label %a, label %b
a:
  ret i32 0
b:
  unreachable
}
