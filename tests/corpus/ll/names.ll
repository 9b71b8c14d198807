; Hand-written IR: names that need quoting (leading digits, UTF-8, empty), unnamed functions,
; numbered block labels that are not numbers, and names that differ only by suffix.

@"1abc" = global i32 1
@"\C3\A9t\C3\A9" = global i32 2
@"foo-bar$baz.qux" = global i32 3
@"" = global i32 4
define void @1() {
  ret void
}
define void @2(i32 %"1x", i32 %"-neg") {
"0x":
  %"\C3\A9" = add i32 %"1x", %"-neg"
  %x = add i32 %"\C3\A9", 1
  %x1 = add i32 %x, 1
  %"x.1" = add i32 %x1, 1
  call void @1()
  ret void
}
