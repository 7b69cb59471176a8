; A CPU-bound program for LLVM's JIT (lli): a recursive fib(32), 40 times. lli compiles it with ORC and
; registers each object it loads through the GDB JIT interface (profiler/tests/jit_programs.rs).

define internal i64 @fib(i64 %n) {
entry:
  %small = icmp slt i64 %n, 2
  br i1 %small, label %done, label %recurse
recurse:
  %a = sub i64 %n, 1
  %fa = call i64 @fib(i64 %a)
  %b = sub i64 %n, 2
  %fb = call i64 @fib(i64 %b)
  %s = add i64 %fa, %fb
  ret i64 %s
done:
  ret i64 %n
}

define i32 @main() {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %acc = phi i64 [ 0, %entry ], [ %acc2, %loop ]
  %f = call i64 @fib(i64 32)
  %acc2 = add i64 %acc, %f
  %next = add i64 %i, 1
  %again = icmp slt i64 %next, 40
  br i1 %again, label %loop, label %exit
exit:
  %r = trunc i64 %acc2 to i32
  %m = and i32 %r, 1
  ret i32 %m
}
