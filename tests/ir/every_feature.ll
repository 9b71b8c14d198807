; A module written to use every construct pyzyme.ir models: each must survive a round trip.
source_filename = "every_feature.c"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

%struct.pair = type { double, i64 }
%struct.node = type { ptr, %struct.pair, [4 x float] }
%struct.packed = type <{ i8, i32 }>
%struct.opaque_t = type opaque

$comdat_fn = comdat any

@g = global double 1.500000e+00, align 8
@counter = internal global i64 0, align 8
@arr = private unnamed_addr constant [3 x i32] [i32 1, i32 2, i32 -3], align 4
@str = private unnamed_addr constant [6 x i8] c"hi \22x\00", align 1
@"quoted name" = internal global i32 7
@nested = internal global { i32, [2 x ptr] } { i32 1, [2 x ptr] [ptr @g, ptr null] }
@vec = internal global <4 x i32> <i32 0, i32 1, i32 2, i32 3>
@pk = internal global %struct.packed <{ i8 1, i32 2 }>
@long = internal global x86_fp80 0xK3FFF8000000000000000
@h = internal global half 0xH3C00
@ptrexpr = internal global ptr getelementptr inbounds (i8, ptr @arr, i64 4)
@intexpr = internal global i64 ptrtoint (ptr @g to i64)
@zero = internal global [8 x double] zeroinitializer
@tls = thread_local global i32 0
@as1 = addrspace(1) global i32 0
@ext = external global i32
@_ZTIi = external constant ptr
@alias_g = alias double, ptr @g

define double @arith(double %a, double %b, i64 %n, i32 %m) {
entry:
  %0 = fadd double %a, %b
  %1 = fsub fast double %0, 1.000000e+00
  %2 = fmul nnan ninf double %1, %a
  %3 = fdiv arcp contract double %2, %b
  %4 = frem double %3, 0x7FF0000000000000
  %5 = fneg double %4
  %i1 = add nuw nsw i64 %n, 1
  %i2 = sub i64 %i1, -1
  %i3 = mul nsw i64 %i2, %n
  %i4 = sdiv exact i64 %i3, 2
  %i5 = udiv i64 %i4, 3
  %i6 = srem i64 %i5, 5
  %i7 = urem i64 %i6, 7
  %i8 = shl nuw i64 %i7, 2
  %i9 = lshr exact i64 %i8, 1
  %i10 = ashr i64 %i9, 1
  %i11 = and i64 %i10, 255
  %i12 = or disjoint i64 %i11, 256
  %i13 = xor i64 %i12, -1
  %c1 = icmp samesign ult i64 %i13, %n
  %c2 = fcmp olt double %5, %a
  %c3 = fcmp fast uno double %5, %b
  %c4 = and i1 %c1, %c2
  %c5 = or i1 %c4, %c3
  %s = select i1 %c5, double %5, double %a
  %s2 = select nnan i1 %c1, double %s, double 0.000000e+00
  %t1 = trunc nuw i64 %n to i32
  %t2 = zext nneg i32 %m to i64
  %t3 = sext i32 %t1 to i64
  %t4 = sitofp i64 %t3 to double
  %t5 = uitofp nneg i64 %t2 to double
  %t6 = fptosi double %s2 to i64
  %t7 = fptoui double %t5 to i32
  %t8 = fptrunc double %t4 to float
  %t9 = fpext float %t8 to double
  %t10 = bitcast double %t9 to i64
  %t11 = inttoptr i64 %t10 to ptr
  %t12 = ptrtoint ptr %t11 to i64
  %t13 = addrspacecast ptr %t11 to ptr addrspace(1)
  %f = freeze i64 %t12
  %fx = sitofp i64 %f to double
  %r = fadd double %s2, %fx
  ret double %r
}

define i64 @loops(ptr noalias nocapture readonly %p, i64 %n) #0 {
entry:
  %cmp = icmp sgt i64 %n, 0
  br i1 %cmp, label %loop, label %exit, !prof !2

loop:
  %i = phi i64 [ 0, %entry ], [ %inc, %latch ]
  %acc = phi fast double [ 0.000000e+00, %entry ], [ %acc2, %latch ]
  %gep = getelementptr inbounds nuw double, ptr %p, i64 %i
  %x = load double, ptr %gep, align 8, !tbaa !3
  %acc2 = fadd fast double %acc, %x
  switch i64 %i, label %latch [
    i64 3, label %three
    i64 5, label %exit
  ]

three:
  store volatile double %acc2, ptr @g, align 8
  br label %latch

latch:
  %inc = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %inc, %n
  br i1 %done, label %exit, label %loop, !llvm.loop !5

exit:
  %res = phi i64 [ 0, %entry ], [ %inc, %latch ], [ -5, %loop ]
  ret i64 %res
}

define void @memory(ptr %out, i64 %k) {
  %1 = alloca [4 x double], align 16
  %2 = alloca i32, i64 %k, align 4
  %3 = alloca %struct.node, align 8
  %4 = getelementptr inbounds %struct.node, ptr %3, i64 0, i32 1, i32 0
  store double 2.000000e+00, ptr %4, align 8
  %5 = getelementptr i8, ptr %1, i64 8
  %6 = load atomic i64, ptr %out seq_cst, align 8
  store atomic i64 %6, ptr %out syncscope("singlethread") release, align 8
  %7 = atomicrmw add ptr @counter, i64 1 monotonic, align 8
  %8 = atomicrmw volatile fadd ptr @g, double 1.000000e+00 seq_cst, align 8
  %9 = cmpxchg ptr @counter, i64 %7, i64 0 acq_rel monotonic, align 8
  %10 = cmpxchg weak volatile ptr @counter, i64 0, i64 1 seq_cst seq_cst, align 8
  %11 = extractvalue { i64, i1 } %9, 1
  fence seq_cst
  fence syncscope("singlethread") acquire
  call void @llvm.memset.p0.i64(ptr align 16 %1, i8 0, i64 32, i1 false)
  call void @llvm.memcpy.p0.p0.i64(ptr noundef nonnull align 8 %out, ptr readonly align 8 %5, i64 %k, i1 true)
  call void @llvm.lifetime.start.p0(ptr %2)
  ret void
}

define <4 x double> @vectors(<4 x double> %v, double %s) {
entry:
  %e = extractelement <4 x double> %v, i64 2
  %ins = insertelement <4 x double> poison, double %s, i64 0
  %splat = shufflevector <4 x double> %ins, <4 x double> poison, <4 x i32> zeroinitializer
  %mix = shufflevector <4 x double> %v, <4 x double> %splat, <4 x i32> <i32 0, i32 5, i32 2, i32 7>
  %sum = fadd <4 x double> %mix, splat (double 1.000000e+00)
  %ex = call fast <4 x double> @llvm.exp.v4f64(<4 x double> %sum)
  %red = call reassoc double @llvm.vector.reduce.fadd.v4f64(double -0.000000e+00, <4 x double> %ex)
  %cmp = fcmp ogt <4 x double> %ex, zeroinitializer
  %sel = select <4 x i1> %cmp, <4 x double> %ex, <4 x double> %v
  %gv = getelementptr double, ptr null, <4 x i64> <i64 0, i64 1, i64 2, i64 3>
  %agg = insertvalue { double, <4 x double> } undef, double %red, 0
  %agg2 = insertvalue { double, <4 x double> } %agg, <4 x double> %sel, 1
  %back = extractvalue { double, <4 x double> } %agg2, 1
  ret <4 x double> %back
}

define i32 @calls(i32 %x, ...) personality ptr @__gxx_personality_v0 {
entry:
  %ap = alloca ptr, align 8
  call void @llvm.va_start.p0(ptr %ap)
  %va = va_arg ptr %ap, i32
  call void @llvm.va_end.p0(ptr %ap)
  %p = call i32 (ptr, ...) @printf(ptr noundef @str, i32 noundef %va) #1
  %t = tail call fastcc i32 @helper(i32 %x)
  %m = notail call i32 @helper(i32 %t)
  %asm = call i32 asm sideeffect "movl $1, $0", "=r,r,~{dirflag}"(i32 %x)
  call void @llvm.assume(i1 true) [ "align"(ptr %ap, i64 8) ]
  call void @llvm.experimental.noalias.scope.decl(metadata !7)
  %r = invoke noundef i32 @helper(i32 %m)
          to label %ok unwind label %lpad

ok:
  ret i32 %r

lpad:
  %lp = landingpad { ptr, i32 }
          cleanup
          catch ptr @_ZTIi
          filter [1 x ptr] [ptr @_ZTIi]
  %sel = extractvalue { ptr, i32 } %lp, 1
  resume { ptr, i32 } %lp
}

define internal fastcc i32 @helper(i32 %y) comdat($comdat_fn) {
entry:
  %cmp = icmp eq i32 %y, 0
  br i1 %cmp, label %dead, label %live

dead:
  unreachable

live:
  %addr = select i1 %cmp, ptr blockaddress(@helper, %dead), ptr blockaddress(@helper, %live)
  indirectbr ptr %addr, [label %dead, label %live2]

live2:
  ret i32 %y
}

define void @"quoted fn"(ptr byval(%struct.pair) align 8 %p, ptr sret(%struct.pair) %q) {
  %"a b" = load i64, ptr @"quoted name", align 4
  ret void
}

declare i32 @printf(ptr noundef, ...) #1
declare i32 @__gxx_personality_v0(...)
declare void @llvm.memset.p0.i64(ptr writeonly captures(none), i8, i64, i1 immarg)
declare void @llvm.memcpy.p0.p0.i64(ptr noalias writeonly captures(none), ptr noalias readonly captures(none), i64, i1 immarg)
declare void @llvm.lifetime.start.p0(ptr captures(none))
declare <4 x double> @llvm.exp.v4f64(<4 x double>)
declare double @llvm.vector.reduce.fadd.v4f64(double, <4 x double>)
declare void @llvm.va_start.p0(ptr)
declare void @llvm.va_end.p0(ptr)
declare void @llvm.assume(i1 noundef)
declare void @llvm.experimental.noalias.scope.decl(metadata)

attributes #0 = { nofree norecurse nosync nounwind memory(argmem: read) "target-cpu"="x86-64" }
attributes #1 = { nounwind }

!llvm.module.flags = !{!0, !1}
!0 = !{i32 7, !"PIC Level", i32 2}
!1 = !{i32 1, !"wchar_size", i32 4}
!2 = !{!"branch_weights", i32 1, i32 2000}
!3 = !{!4, !4, i64 0}
!4 = !{!"double", !10, i64 0}
!5 = distinct !{!5, !6}
!6 = !{!"llvm.loop.mustprogress"}
!7 = !{!8}
!8 = distinct !{!8, !9, !"calls: %x"}
!9 = distinct !{!9, !"calls"}
!10 = !{!"Simple C/C++ TBAA"}
