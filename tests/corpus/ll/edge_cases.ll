; Hand-written IR for lexical and naming edge cases: quoted and numbered names, escapes,
; unusual types and constants, attributes with arguments, debug records, empty bodies.

source_filename = "edge \22cases\22.c"

%"class.std::vector<double>" = type { ptr, ptr, ptr }
%"struct.with space" = type { i32 }
%struct.rec = type { ptr, %struct.rec2 }
%struct.rec2 = type { i64 }
%struct.empty = type {}


@"global with space" = global i32 1
@"\01asm_name" = global i32 2
@"quote\22inside" = constant [3 x i8] c"a\22b"
@.str.1 = private unnamed_addr constant [5 x i8] c"\00\01\02\7F\80", align 1
@0 = private global i32 3
@1 = private global ptr @0
@named.0 = global ptr @1
@big = global i128 -170141183460469231731687303715884105728
@huge = global i256 115792089237316195423570985008687907853269984665640564039457584007913129639935
@wide = global <2 x i128> <i128 1, i128 -1>
@hex_half = global half 0xH7C00
@neg_zero_d = global double -0.000000e+00
@denorm = global float 0x36A0000000000000
@empty = global %struct.empty zeroinitializer
@empty_arr = global [0 x i32] zeroinitializer
@recursive = global %struct.rec { ptr @recursive, %struct.rec2 { i64 7 } }
@vec_of_ptr = global <2 x ptr> <ptr @0, ptr null>
@cstr = global ptr getelementptr inbounds ([3 x i8], ptr @"quote\22inside", i64 0, i64 1)
@llvm.global.annotations = appending global [1 x { ptr, ptr, ptr, i32, ptr }] [{ ptr, ptr, ptr, i32, ptr } { ptr @"global with space", ptr @.str.1, ptr @.str.1, i32 10, ptr null }], section "llvm.metadata"

declare void @"external fn"(double nofpclass(nan inf) "custom-param-attr"="1", ptr)
declare noalias ptr @my_alloc(i64) allockind("alloc,zeroed") allocsize(0) "alloc-family"="pyzyme"
declare float @nofp(float nofpclass(nan)) memory(read, argmem: readwrite)

define void @"fn with space"(ptr %"arg with space", ptr %0) {
"entry block":
  %"local.name" = load i32, ptr %"arg with space", align 4
  %1 = add i32 %"local.name", 1
  store i32 %1, ptr %0, align 4
  br label %"exit\22quoted"

"exit\22quoted":
  ret void
}

define i32 @numbered(i32 %0, i32 %1) {
  %3 = add i32 %0, %1
  br label %4

4:
  %5 = phi i32 [ %3, %2 ], [ %6, %4 ]
  %6 = mul i32 %5, 2
  %7 = icmp ult i32 %6, 1000
  br i1 %7, label %4, label %8

8:
  ret i32 %6
}

declare void @takes_target(target("pyzyme.handle", i32, 1), target("pyzyme.bare"))

define void @passes_target(target("pyzyme.handle", i32, 1) %h) {
  call void @takes_target(target("pyzyme.handle", i32, 1) %h, target("pyzyme.bare") poison)
  ret void
}

define void @empty_fn() {
  ret void
}

define i64 @mixed_names(i64 %x) {
entry:
  %0 = add i64 %x, 1
  %a = add i64 %0, 2
  %1 = add i64 %a, 3
  ret i64 %1
}

define double @debug_records(double %x) !dbg !5 {
entry:
  %slot = alloca double, align 8
    #dbg_declare(ptr %slot, !9, !DIExpression(), !11)
  store double %x, ptr %slot, align 8
    #dbg_value(double %x, !9, !DIExpression(), !11)
    #dbg_value(!DIArgList(double %x, double %x), !9, !DIExpression(DW_OP_LLVM_arg, 0, DW_OP_LLVM_arg, 1, DW_OP_plus, DW_OP_stack_value), !11)
  %y = fmul double %x, %x, !dbg !11
    #dbg_label(!12, !11)
  ret double %y, !dbg !11
}

define <vscale x 2 x double> @scalable(<vscale x 2 x double> %v, i64 %i) vscale_range(1,16) {
  %e = extractelement <vscale x 2 x double> %v, i64 %i
  %w = insertelement <vscale x 2 x double> %v, double %e, i64 0
  %s = shufflevector <vscale x 2 x double> %w, <vscale x 2 x double> poison, <vscale x 2 x i32> zeroinitializer
  ret <vscale x 2 x double> %s
}

declare void @llvm.pyzyme.takes_metadata(metadata, metadata)

define void @metadata_args(ptr %p) {
  call void @llvm.pyzyme.takes_metadata(metadata ptr %p, metadata !{i32 1, !"inline node"})
  call void @llvm.pyzyme.takes_metadata(metadata !"string", metadata !2)
  ret void
}

define float @denormal_attrs(float %x) #0 {
  %r = call nnan float @nofp(float %x)
  ret float %r
}

attributes #0 = { "denormal-fp-math"="preserve-sign,preserve-sign" "unsafe-fp-math"="true" "key with space"="value with \22quote\22" nounwind }

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!3, !4}

!0 = distinct !DICompileUnit(language: DW_LANG_C11, file: !1, producer: "pyzyme", isOptimized: true, runtimeVersion: 0, emissionKind: FullDebug, enums: !2)
!1 = !DIFile(filename: "edge.c", directory: "/tmp")
!2 = !{}
!3 = !{i32 2, !"Debug Info Version", i32 3}
!4 = !{i32 7, !"Dwarf Version", i32 5}
!5 = distinct !DISubprogram(name: "debug_records", scope: !1, file: !1, line: 1, type: !6, scopeLine: 1, flags: DIFlagPrototyped, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0, retainedNodes: !2)
!6 = !DISubroutineType(types: !7)
!7 = !{!8, !8}
!8 = !DIBasicType(name: "double", size: 64, encoding: DW_ATE_float)
!9 = !DILocalVariable(name: "x", arg: 1, scope: !5, file: !1, line: 1, type: !8)
!10 = !DILocation(line: 1, column: 1, scope: !5)
!11 = !DILocation(line: 2, column: 3, scope: !5, inlinedAt: !10)
!12 = !DILabel(scope: !5, name: "top", file: !1, line: 2)
