; Hand-written IR for calls: calling conventions, parameter and return attributes, operand
; bundles, musttail/notail, inline asm, callbr, invoke with Itanium and funclet-based EH.

%struct.big = type { [8 x i64] }

declare i32 @__gxx_personality_v0(...)
declare i32 @__CxxFrameHandler3(...)
declare void @may_throw(i32)
declare fastcc double @fast_callee(double, double)
declare coldcc void @cold_callee() cold
declare cc 10 i64 @ghc_callee(i64)
declare x86_vectorcallcc <4 x float> @vector_callee(<4 x float>)
declare noalias noundef nonnull align 16 dereferenceable(64) ptr @alloc(i64 noundef) allocsize(0)
declare void @with_byval(ptr byval(%struct.big) align 8, ptr sret(%struct.big) align 8, ptr inalloca(i32))
declare zeroext i1 @flagged(i8 signext, i16 zeroext, ptr nocapture readonly, ptr writeonly noalias, i32 inreg)
declare range(i32 0, 10) i32 @ranged(ptr dereferenceable_or_null(16) initializes((0, 8)) dead_on_unwind writable)
declare ptr @returned_arg(ptr returned, ptr nofree nonnull)
declare void @llvm.assume(i1)
declare void @llvm.lifetime.start.p0(ptr)
declare void @llvm.lifetime.end.p0(ptr)
declare i32 @llvm.smax.i32(i32, i32)
declare double @llvm.fmuladd.f64(double, double, double)
declare float @llvm.vector.reduce.fadd.v4f32(float, <4 x float>)
declare <4 x float> @llvm.masked.load.v4f32.p0(ptr, <4 x i1>, <4 x float>)
declare void @llvm.memcpy.p0.p0.i64(ptr noalias writeonly, ptr noalias readonly, i64, i1 immarg)
declare void @llvm.memset.p0.i64(ptr writeonly, i8, i64, i1 immarg)
declare token @llvm.experimental.convergence.entry()
declare ptr @llvm.stacksave.p0()
declare void @llvm.stackrestore.p0(ptr)

define double @conventions(double %x, i64 %n, <4 x float> %v) {
  %a = call fastcc double @fast_callee(double %x, double 2.0)
  call coldcc void @cold_callee() #2
  %b = tail call cc 10 i64 @ghc_callee(i64 %n)
  %c = notail call x86_vectorcallcc <4 x float> @vector_callee(<4 x float> %v)
  %r = call reassoc float @llvm.vector.reduce.fadd.v4f32(float 0.0, <4 x float> %c)
  %rd = fpext float %r to double
  %bd = sitofp i64 %b to double
  %m = call fast double @llvm.fmuladd.f64(double %a, double %bd, double %rd)
  ret double %m
}

define i32 @attributes(ptr %p, ptr %q) {
  %big = alloca %struct.big, align 8
  %out = alloca %struct.big, align 8
  %ia = alloca inalloca i32, align 4
  call void @llvm.lifetime.start.p0(ptr %big)
  call void @llvm.memset.p0.i64(ptr align 8 %big, i8 0, i64 64, i1 false)
  call void @with_byval(ptr byval(%struct.big) align 8 %big, ptr sret(%struct.big) align 8 %out, ptr inalloca(i32) %ia)
  call void @llvm.memcpy.p0.p0.i64(ptr align 1 %q, ptr align 8 %out, i64 64, i1 true)
  call void @llvm.lifetime.end.p0(ptr %big)
  %f = call zeroext i1 @flagged(i8 signext -1, i16 zeroext 7, ptr %p, ptr %q, i32 inreg 3)
  %r = call range(i32 0, 10) i32 @ranged(ptr %p), !range !0
  %s = call i32 @llvm.smax.i32(i32 %r, i32 0)
  %nn = icmp ne ptr %p, null
  call void @llvm.assume(i1 %nn)
  call void @llvm.assume(i1 true) [ "nonnull"(ptr %p), "align"(ptr %p, i64 8) ]
  %mem = call ptr @alloc(i64 64)
  %same = call ptr @returned_arg(ptr %mem, ptr %p)
  %m = call <4 x float> @llvm.masked.load.v4f32.p0(ptr align 4 %same, <4 x i1> <i1 true, i1 false, i1 true, i1 false>, <4 x float> poison)
  %z = zext i1 %f to i32
  %t = add i32 %s, %z
  ret i32 %t
}

define cc 10 i64 @tail_calls(i64 %n) {
  %r = musttail call cc 10 i64 @ghc_callee(i64 %n)
  ret i64 %r
}

define i32 @inline_asm(i32 %a, i32 %b) {
  %r = call i32 asm "addl $2, $0", "=r,0,r,~{cc},~{dirflag},~{fpsr},~{flags}"(i32 %a, i32 %b)
  %s = call { i32, i32 } asm sideeffect inteldialect "mov $0, $2", "=r,=r,r,~{memory}"(i32 %r)
  %x = extractvalue { i32, i32 } %s, 0
  call void asm sideeffect "", "~{memory}"()
  ret i32 %x
}

define i32 @asm_goto(i32 %x) {
entry:
  callbr void asm "testl $0, $0; jne ${1:l}", "r,!i,~{dirflag},~{fpsr},~{flags}"(i32 %x)
          to label %fallthrough [label %indirect]
fallthrough:
  ret i32 0
indirect:
  ret i32 1
}

define i32 @itanium_eh(i32 %k) personality ptr @__gxx_personality_v0 {
entry:
  %saved = call ptr @llvm.stacksave.p0()
  invoke void @may_throw(i32 %k)
          to label %cont unwind label %lpad
cont:
  invoke void @may_throw(i32 1)
          to label %done unwind label %filter
done:
  call void @llvm.stackrestore.p0(ptr %saved)
  ret i32 0
lpad:
  %lp = landingpad { ptr, i32 }
          cleanup
          catch ptr null
  %sel = extractvalue { ptr, i32 } %lp, 1
  %is = icmp eq i32 %sel, 1
  br i1 %is, label %handled, label %reraise
filter:
  %lf = landingpad { ptr, i32 }
          filter [1 x ptr] [ptr null]
  resume { ptr, i32 } %lf
handled:
  ret i32 1
reraise:
  resume { ptr, i32 } %lp
}

define void @funclet_eh() personality ptr @__CxxFrameHandler3 {
entry:
  invoke void @may_throw(i32 0)
          to label %exit unwind label %dispatch
dispatch:
  %cs = catchswitch within none [label %handler] unwind label %cleanup
handler:
  %cp = catchpad within %cs [ptr null, i32 64, ptr null]
  call void @may_throw(i32 2) [ "funclet"(token %cp) ]
  catchret from %cp to label %exit
cleanup:
  %cl = cleanuppad within none []
  call void @cold_callee() [ "funclet"(token %cl) ]
  cleanupret from %cl unwind to caller
exit:
  ret void
}

define void @convergent_user() convergent {
  %t = call token @llvm.experimental.convergence.entry()
  call void @cold_callee() [ "convergencectrl"(token %t) ]
  ret void
}

define i32 @deopt_bundle(i32 %x) {
  call void @may_throw(i32 %x) [ "deopt"(i32 %x, i64 42), "unknown-bundle"() ]
  ret i32 %x
}

attributes #2 = { cold noinline nounwind "frame-pointer"="all" "pyzyme-test"="yes" }

!0 = !{i32 0, i32 10}
