; Hand-written IR for module-level entities: linkages, visibility, TLS modes, address spaces,
; comdats, aliases, ifuncs, sections, partitions, constructors, llvm.used, module asm,
; constant expressions and initializers of every shape, named metadata and module flags.

module asm "  .globl pyzyme_asm_symbol"
module asm "pyzyme_asm_symbol: ret"

$comdat_any = comdat any
$comdat_largest = comdat largest
$comdat_nodup = comdat nodeduplicate

%struct.S = type { i32, [3 x float], ptr, { i8, double } }
%struct.fwd = type opaque

@i = global i32 42, align 4
@c = constant [5 x i8] c"ab\00\FF\0A", align 1
@str = private unnamed_addr constant [14 x i8] c"hello, world\0A\00", align 1
@s = internal global %struct.S { i32 1, [3 x float] [float 1.0, float 2.5, float -0.0], ptr @i, { i8, double } { i8 7, double 0x7FF0000000000000 } }, align 16
@zero = common global [16 x double] zeroinitializer, align 32
@undef_init = global i64 undef
@poison_init = global <2 x i32> poison
@vec = global <4 x i32> <i32 1, i32 -1, i32 2147483647, i32 -2147483648>
@splat_vec = global <4 x float> splat (float 1.5)
@ext = external global i32
@ext_weak = extern_weak global ptr
@weak = weak global i32 3
@weak_odr = weak_odr global i32 4, comdat($comdat_any)
@linkonce = linkonce global i32 5
@linkonce_odr = linkonce_odr hidden global i32 6, comdat($comdat_largest)
@available = available_externally global i32 7
@appending_like = private global [2 x ptr] [ptr @i, ptr @weak]
@protected = protected global i32 8
@dllish = dso_local global i32 9
@tls_gd = thread_local global i32 1
@tls_ld = thread_local(localdynamic) global i32 2
@tls_ie = thread_local(initialexec) global i32 3
@tls_le = internal thread_local(localexec) global i32 4
@as1 = addrspace(1) global i32 10, align 4
@sectioned = global i32 11, section ".pyzyme", partition "part1", align 8
@ext_init = externally_initialized global i32 12
@nodup = global i32 13, comdat($comdat_nodup)
@const_exprs = global [4 x i64] [
  i64 ptrtoint (ptr @i to i64),
  i64 sub (i64 ptrtoint (ptr @c to i64), i64 ptrtoint (ptr @i to i64)),
  i64 ptrtoint (ptr getelementptr inbounds (%struct.S, ptr @s, i64 0, i32 3, i32 1) to i64),
  i64 add (i64 ptrtoint (ptr @weak to i64), i64 8)
]
@gep_ptr = global ptr getelementptr (i8, ptr @c, i64 2)
@as_cast = global ptr addrspacecast (ptr addrspace(1) @as1 to ptr)
@fn_table = global [2 x ptr] [ptr @f, ptr @g_internal], align 16
@packed = global <{ i8, i32 }> <{ i8 1, i32 2 }>
@nested_array = global [2 x [2 x i16]] [[2 x i16] [i16 1, i16 2], [2 x i16] zeroinitializer]
@blockaddr = global ptr blockaddress(@f, %target)
@dso_equiv = global ptr dso_local_equivalent @f
@no_cfi_ptr = global ptr no_cfi @f
@llvm.used = appending global [1 x ptr] [ptr @sectioned], section "llvm.metadata"
@llvm.compiler.used = appending global [1 x ptr] [ptr @protected], section "llvm.metadata"
@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] [{ i32, ptr, ptr } { i32 65535, ptr @ctor, ptr null }]
@llvm.global_dtors = appending global [1 x { i32, ptr, ptr }] [{ i32, ptr, ptr } { i32 101, ptr @ctor, ptr @i }]

@alias = alias i32, ptr @i
@alias_gep = hidden alias i8, getelementptr (i8, ptr @c, i64 1)
@alias_fn = weak alias void (), ptr @ctor
@ifunc = ifunc i32 (i32), ptr @resolver

define internal void @ctor() {
  %v = load i32, ptr @i, align 4
  %w = add i32 %v, 1
  store i32 %w, ptr @i, align 4
  ret void
}

define internal ptr @resolver() {
  ret ptr @f
}

define i32 @f(i32 %x) section ".text.f" comdat($comdat_any) align 16 prefix i32 123 prologue i8 -112 {
entry:
  %tls = load i32, ptr @tls_gd, align 4
  %tls2 = call ptr @llvm.threadlocal.address.p0(ptr @tls_le)
  %le = load i32, ptr %tls2, align 4
  %as = load i32, ptr addrspace(1) @as1, align 4
  %gen = addrspacecast ptr addrspace(1) @as1 to ptr
  %gv = load volatile i32, ptr %gen, align 4, !nontemporal !7
  %a = add i32 %x, %tls
  %b = add i32 %a, %le
  %cc = add i32 %b, %as
  %d = add i32 %cc, %gv
  %ind = call i32 @ifunc(i32 %d)
  br label %target
target:
  ret i32 %ind
}

define internal i32 @g_internal(i32 %x) unnamed_addr #0 {
  ret i32 %x
}

define private i32 @g_private(i32 %x) local_unnamed_addr {
  ret i32 %x
}

define linkonce_odr hidden i32 @g_linkonce(ptr %p) gc "statepoint-example" {
  %v = load i32, ptr %p, align 4, !tbaa !3, !noundef !7, !invariant.load !7
  ret i32 %v
}

define available_externally i32 @g_avail(i32 %x) {
  ret i32 %x
}

define weak_odr dso_local void @g_weak() #0 {
  ret void
}

declare ptr @llvm.threadlocal.address.p0(ptr)

define void @loop_md(ptr %p, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %addr = getelementptr inbounds double, ptr %p, i64 %i
  %v = load double, ptr %addr, align 8, !tbaa !8, !alias.scope !13, !noalias !13
  %w = fmul double %v, 2.0
  store double %w, ptr %addr, align 8, !tbaa !8
  %next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop, !prof !10, !llvm.loop !11
exit:
  ret void
}

attributes #0 = { noinline nounwind optnone uwtable(sync) memory(argmem: readwrite, inaccessiblemem: none) "target-cpu"="x86-64" "no-trapping-math"="true" }

!llvm.module.flags = !{!0, !1, !2}
!llvm.ident = !{!5}
!pyzyme.custom = !{!6, !7, !5}

!0 = !{i32 1, !"wchar_size", i32 4}
!1 = !{i32 7, !"uwtable", i32 2}
!2 = !{i32 8, !"PIC Level", i32 2}
!3 = !{!4, !4, i64 0}
!4 = !{!"int", !9, i64 0}
!5 = !{!"pyzyme hand-written corpus"}
!6 = !{i32 -1, i64 123456789012, float 1.5, ptr @i, !"string with \22 quote"}
!7 = !{}
!8 = !{!"double", !9, i64 0}
!9 = !{!"omnipotent char", !5, i64 0}
!10 = !{!"branch_weights", i32 1, i32 2000}
!11 = distinct !{!11, !12}
!12 = !{!"llvm.loop.mustprogress"}
!13 = !{!14}
!14 = distinct !{!14, !15, !"scope"}
!15 = distinct !{!15, !"domain"}
