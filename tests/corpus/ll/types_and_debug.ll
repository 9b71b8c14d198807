; Hand-written IR: numbered and opaque struct types, inrange/ptrauth constants, TLS aliases,
; internal ifuncs, inline asm invoked with unwind, #dbg_assign records, poison/undef phis.

%0 = type { i32, double }
%1 = type opaque
%struct.op = type opaque
@ext = external global %struct.op
@ext2 = external global %1
@n = global %0 { i32 1, double 2.0 }

@vt = constant { [4 x ptr] } { [4 x ptr] [ptr null, ptr null, ptr @f, ptr @f] }
@vtp = global ptr getelementptr inbounds inrange(-16, 16) ({ [4 x ptr] }, ptr @vt, i32 0, i32 0, i32 2)
@pa = global ptr ptrauth (ptr @f, i32 0)
@tla = thread_local(initialexec) alias i32, ptr @g
@g = thread_local global i32 0
@hid = hidden unnamed_addr alias i32, ptr @g
@ifn = internal ifunc void (), ptr @res
@floats = global [6 x double] [double 1.000000e+100, double 0x7FF8000000000001, double 0xFFF0000000000000, double 4.940656e-324, double 0x3FB999999999999A, double -1.5]
@bools = global [2 x i1] [i1 true, i1 false]
@bytes = global [2 x i8] [i8 -128, i8 127]

define void @f() partition "p2" {
  ret void
}
define internal ptr @res() {
  ret ptr @f
}
declare i32 @__gxx_personality_v0(...)
define void @asm_invoke() personality ptr @__gxx_personality_v0 {
entry:
  invoke void asm sideeffect alignstack unwind "nop", "~{dirflag}"()
          to label %ok unwind label %lp, !srcloc !0
ok:
  ret void
lp:
  %l = landingpad { ptr, i32 } cleanup
  resume { ptr, i32 } %l
}
define void @dbg_assign(ptr %p) !dbg !3 {
  %a = alloca i32, align 4, !DIAssignID !9
    #dbg_assign(i1 poison, !7, !DIExpression(), !9, ptr %a, !DIExpression(), !8)
  store i32 1, ptr %a, align 4, !DIAssignID !10
    #dbg_assign(i32 1, !7, !DIExpression(), !10, ptr %a, !DIExpression(), !8)
  ret void
}
define void @uses_uselist(i32 %x) {
  %a = add i32 %x, 1
  %b = add i32 %x, 2
  ret void
}
define <2 x ptr> @splat_ptr() {
  ret <2 x ptr> splat (ptr null)
}
define i32 @phi_many(i1 %c, i32 %x) {
entry:
  br i1 %c, label %a, label %b
a:
  br label %m
b:
  br label %m
m:
  %p = phi i32 [ %x, %a ], [ poison, %b ]
  %q = phi i32 [ undef, %a ], [ 0, %b ]
  %r = add i32 %p, %q
  ret i32 %r
}
!llvm.dbg.cu = !{!1}
!llvm.module.flags = !{!11, !12}
!0 = !{i64 1234}
!1 = distinct !DICompileUnit(language: DW_LANG_C11, file: !2, producer: "x", isOptimized: true, runtimeVersion: 0, emissionKind: FullDebug)
!2 = !DIFile(filename: "a.c", directory: "/")
!3 = distinct !DISubprogram(name: "dbg_assign", scope: !2, file: !2, line: 1, type: !4, spFlags: DISPFlagDefinition, unit: !1, retainedNodes: !6)
!4 = !DISubroutineType(types: !5)
!5 = !{null}
!6 = !{}
!7 = !DILocalVariable(name: "a", scope: !3, file: !2, line: 1, type: !13)
!8 = !DILocation(line: 1, column: 1, scope: !3)
!9 = distinct !DIAssignID()
!10 = distinct !DIAssignID()
!11 = !{i32 2, !"Debug Info Version", i32 3}
!12 = !{i32 7, !"debug-info-assignment-tracking", i1 true}
!13 = !DIBasicType(name: "int", size: 32, encoding: DW_ATE_signed)

define i32 @numbered_types(ptr %p) {
  %g = getelementptr %0, ptr %p, i64 0, i32 1
  %v = load %0, ptr %p, align 8
  %x = extractvalue %0 %v, 0
  %a = alloca %0, align 8
  store %0 %v, ptr %a, align 8
  %o = load ptr, ptr @ext, align 8
  ret i32 %x
}
