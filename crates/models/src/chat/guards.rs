//! Checks a chat template's expressions run under, where minijinja computes what Jinja refuses or
//! holds no bound of its own: the source is rewritten before it compiles.
//!
//! - A divisor of `/` or `//` passes through `__divisor(..)`: Python raises ZeroDivisionError on
//!   a zero one, where minijinja gives `inf` or NaN (`{{ 1 / 0 }}` renders "inf").
//! - The value of every `+`, `*` and `~`, every filter and every call passes through
//!   `__bounded(..)`, which refuses a string or a sequence longer than the render's output
//!   bound: a string doubled in a loop, or `[0] * 2 ** 40` turned into a list, is an error at
//!   the first step past the bound instead of an allocation that aborts the process. (A value
//!   is measured once it exists, so one step can still build up to its own growth factor past
//!   the bound; the captures of `{% set %}...{% endset %}` and in-place `append` are not seen.)
//!
//! - Every byte a render emits, into the prompt or into a capture (`{% set %}…{% endset %}`, a
//!   macro's body, a `{% filter %}` block), is counted against a budget of
//!   [`EMITTED_PER_RENDERED`] times the output bound: expressions by the formatter, template
//!   text by a `{{ __raw(n) }}` inserted after its first character that is not whitespace (so
//!   that `trim_blocks`, `lstrip_blocks` and `-` cut the same whitespace). A capture that a loop
//!   fills without printing it stops there. A `{% raw %}` block's text is counted by a
//!   `{% do __raw(n) %}` just before its tag, which takes over the tag's whitespace control.
//!
//! Each rewrite wraps one expression's source range, found from the spans of its node and its
//! children in minijinja's own parse (`unstable_machinery`, pinned by Cargo.lock): ranges nest,
//! so the wrapped source parses to the same tree with the calls added.

use minijinja::machinery::{WhitespaceConfig, ast};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// The function that checks a divisor.
pub(super) const DIVISOR: &str = "__divisor";
/// The function that bounds a value.
pub(super) const BOUNDED: &str = "__bounded";
/// The function that counts a piece of template text.
pub(super) const RAW: &str = "__raw";
/// How many times the output bound a render may emit in all: a byte of the prompt is emitted
/// once more for each capture or macro it passed through on its way there.
pub(super) const EMITTED_PER_RENDERED: usize = 8;

/// `source` with the guards inserted, or minijinja's parse error.
pub(super) fn guarded(source: &str) -> Result<String, Error> {
    let whitespace = WhitespaceConfig {
        keep_trailing_newline: false,
        lstrip_blocks: true,
        trim_blocks: true,
    };
    let tree = minijinja::machinery::parse(source, "chat", SyntaxConfig, whitespace)?;
    let mut wraps = Vec::new();
    statement(source, &tree, &mut wraps);
    let mut markers = Vec::new();
    raw_markers(source, &tree, &mut markers);
    // Openings and closings in source order; where several meet at one offset, closings first,
    // the outer range opening before the inner and the inner closing before the outer.
    let mut edits: Vec<(usize, bool, usize, String)> = Vec::with_capacity(2 * wraps.len());
    for Wrap {
        start,
        end,
        function,
    } in wraps
    {
        edits.push((start, true, usize::MAX - end, format!("{function}(")));
        edits.push((end, false, usize::MAX - start, ")".to_owned()));
    }
    for (offset, text) in markers {
        edits.push((offset, true, usize::MAX, text));
    }
    edits.sort_by_key(|(offset, opens, order, _)| (*offset, *opens, *order));
    let mut out = String::with_capacity(source.len() + edits.len() * 12);
    let mut at = 0;
    for (offset, _, _, text) in edits {
        out.push_str(&source[at..offset]);
        out.push_str(&text);
        at = offset;
    }
    out.push_str(&source[at..]);
    Ok(out)
}

/// Adds `bytes` to what a render has emitted, or the error of a render past `budget`.
pub(super) fn count(
    emitted: &std::sync::atomic::AtomicUsize,
    bytes: usize,
    budget: usize,
) -> Result<(), Error> {
    let before = emitted.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    match before.saturating_add(bytes) > budget {
        true => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "more than {budget} bytes emitted into the prompt and its captures \
                 ({EMITTED_PER_RENDERED} times the rendered prompt's bound)"
            ),
        )),
        false => Ok(()),
    }
}

/// `__divisor(v)`: `v`, unless it is a zero number.
pub(super) fn divisor(value: Value) -> Result<Value, Error> {
    let zero =
        value.kind() == ValueKind::Number && f64::try_from(value.clone()).is_ok_and(|v| v == 0.0);
    match zero {
        true => Err(Error::new(
            ErrorKind::InvalidOperation,
            "division by zero (Jinja raises ZeroDivisionError)",
        )),
        false => Ok(value),
    }
}

/// `__bounded(v)` under `limit`: `v`, unless it is a string of more than `limit` bytes or a
/// sequence, iterable or map of more than `limit` items.
pub(super) fn bounded(value: Value, limit: usize) -> Result<Value, Error> {
    let size = match value.kind() {
        ValueKind::String => value.as_str().map_or(0, str::len),
        ValueKind::Bytes => value.as_bytes().map_or(0, <[u8]>::len),
        _ => value.len().unwrap_or(0),
    };
    match size > limit {
        true => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "a value of {size} bytes or items, over the {limit} the rendered prompt may hold"
            ),
        )),
        false => Ok(value),
    }
}

/// One expression's source range, to pass through `function`.
struct Wrap {
    start: usize,
    end: usize,
    function: &'static str,
}

fn statements(source: &str, body: &[ast::Stmt], wraps: &mut Vec<Wrap>) {
    for stmt in body {
        statement(source, stmt, wraps);
    }
}

fn statement(source: &str, stmt: &ast::Stmt, wraps: &mut Vec<Wrap>) {
    use ast::Stmt;
    match stmt {
        Stmt::Template(t) => statements(source, &t.children, wraps),
        Stmt::EmitExpr(e) => expression(source, &e.expr, Holder::Other, wraps),
        Stmt::EmitRaw(_) => {}
        Stmt::ForLoop(f) => {
            expression(source, &f.iter, Holder::Other, wraps);
            if let Some(filter) = &f.filter_expr {
                expression(source, filter, Holder::Other, wraps);
            }
            statements(source, &f.body, wraps);
            statements(source, &f.else_body, wraps);
        }
        Stmt::IfCond(c) => {
            expression(source, &c.expr, Holder::Other, wraps);
            statements(source, &c.true_body, wraps);
            statements(source, &c.false_body, wraps);
        }
        Stmt::WithBlock(w) => {
            for (_, value) in &w.assignments {
                expression(source, value, Holder::Other, wraps);
            }
            statements(source, &w.body, wraps);
        }
        Stmt::Set(s) => expression(source, &s.expr, Holder::Other, wraps),
        Stmt::SetBlock(s) => statements(source, &s.body, wraps),
        Stmt::AutoEscape(a) => statements(source, &a.body, wraps),
        Stmt::FilterBlock(f) => statements(source, &f.body, wraps),
        Stmt::Block(b) => statements(source, &b.body, wraps),
        Stmt::Import(i) => expression(source, &i.expr, Holder::Other, wraps),
        Stmt::FromImport(i) => expression(source, &i.expr, Holder::Other, wraps),
        Stmt::Extends(e) => expression(source, &e.name, Holder::Other, wraps),
        Stmt::Include(i) => expression(source, &i.name, Holder::Other, wraps),
        Stmt::Macro(m) => {
            for default in &m.defaults {
                expression(source, default, Holder::Other, wraps);
            }
            statements(source, &m.body, wraps);
        }
        // The call of `{% call %}` and `{% do %}` stays a call (the syntax needs one, and
        // `caller` goes to it); its arguments are guarded.
        Stmt::CallBlock(c) => {
            call_parts(source, &c.call, wraps);
            for default in &c.macro_decl.defaults {
                expression(source, default, Holder::Other, wraps);
            }
            statements(source, &c.macro_decl.body, wraps);
        }
        Stmt::Do(d) => call_parts(source, &d.call, wraps),
    }
}

/// The callee and arguments of a call that must stay a call (`{% call %}`, `{% do %}`).
fn call_parts(source: &str, call: &ast::Call, wraps: &mut Vec<Wrap>) {
    expression(source, &call.expr, Holder::Other, wraps);
    for arg in &call.args {
        expression(source, argument(arg), Holder::Other, wraps);
    }
}

fn wrap(source: &str, expr: &ast::Expr, function: &'static str, wraps: &mut Vec<Wrap>) {
    let (start, end) = with_parentheses(source, extent(expr));
    wraps.push(Wrap {
        start,
        end,
        function,
    });
}

/// What holds an expression, for whether its value is checked there or by its holder: the
/// checks of a chain (`a ~ b ~ c`, `x|f|g`) go around the whole chain, since a call around each
/// link would nest them as deep as the chain is long, past minijinja's parser's depth (150)
/// for a chain the template wrote flat.
#[derive(Clone, Copy, PartialEq)]
enum Holder {
    /// A `+`, `*` or `~`.
    Growing,
    /// A filter, of this value.
    Filter,
    Other,
}

fn expression(source: &str, expr: &ast::Expr, holder: Holder, wraps: &mut Vec<Wrap>) {
    use ast::{BinOpKind, Expr};
    let growing =
        |b: &ast::BinOp| matches!(b.op, BinOpKind::Add | BinOpKind::Mul | BinOpKind::Concat);
    match expr {
        Expr::BinOp(b) if growing(b) => {
            for child in children(expr) {
                expression(source, child, Holder::Growing, wraps);
            }
            if holder != Holder::Growing {
                wrap(source, expr, BOUNDED, wraps);
            }
        }
        Expr::Filter(f) => {
            if let Some(value) = &f.expr {
                expression(source, value, Holder::Filter, wraps);
            }
            for arg in &f.args {
                expression(source, argument(arg), Holder::Other, wraps);
            }
            // A filter of a value (not the `{% filter %}` block's name alone).
            if f.expr.is_some() && holder != Holder::Filter {
                wrap(source, expr, BOUNDED, wraps);
            }
        }
        _ => {
            for child in children(expr) {
                expression(source, child, Holder::Other, wraps);
            }
            match expr {
                Expr::BinOp(b) if matches!(b.op, BinOpKind::Div | BinOpKind::FloorDiv) => {
                    wrap(source, &b.right, DIVISOR, wraps)
                }
                Expr::Call(_) => wrap(source, expr, BOUNDED, wraps),
                _ => {}
            }
        }
    }
}

fn argument<'s, 'a>(arg: &'s ast::CallArg<'a>) -> &'s ast::Expr<'a> {
    match arg {
        ast::CallArg::Pos(e)
        | ast::CallArg::Kwarg(_, e)
        | ast::CallArg::PosSplat(e)
        | ast::CallArg::KwargSplat(e) => e,
    }
}

/// The expressions `expr` holds, its operands and arguments.
fn children<'s, 'a>(expr: &'s ast::Expr<'a>) -> Vec<&'s ast::Expr<'a>> {
    use ast::Expr;
    match expr {
        Expr::Var(_) | Expr::Const(_) => Vec::new(),
        Expr::Slice(s) => std::iter::once(&s.expr)
            .chain([&s.start, &s.stop, &s.step].into_iter().flatten())
            .collect(),
        Expr::UnaryOp(u) => vec![&u.expr],
        Expr::BinOp(b) => vec![&b.left, &b.right],
        Expr::Compare(c) => std::iter::once(&c.expr)
            .chain(c.ops.iter().map(|op| &op.expr))
            .collect(),
        Expr::IfExpr(i) => [&i.test_expr, &i.true_expr]
            .into_iter()
            .chain(&i.false_expr)
            .collect(),
        Expr::Filter(f) => f.expr.iter().chain(f.args.iter().map(argument)).collect(),
        Expr::Test(t) => std::iter::once(&t.expr)
            .chain(t.args.iter().map(argument))
            .collect(),
        Expr::GetAttr(g) => vec![&g.expr],
        Expr::GetItem(g) => vec![&g.expr, &g.subscript_expr],
        Expr::Call(c) => std::iter::once(&c.expr)
            .chain(c.args.iter().map(argument))
            .collect(),
        Expr::List(l) => l.items.iter().collect(),
        Expr::Map(m) => m.keys.iter().chain(&m.values).collect(),
    }
}

/// The source range `[start, end)` of `expr` and all it holds: a node's own span can start
/// after its operand (a filter's starts at its name).
fn extent(expr: &ast::Expr) -> (usize, usize) {
    let span = expr.span();
    children(expr).into_iter().map(extent).fold(
        (span.start_offset as usize, span.end_offset as usize),
        |(start, end), (child_start, child_end)| (start.min(child_start), end.max(child_end)),
    )
}

/// `range` widened over the parentheses around its start or end: a node's span leaves out the
/// parentheses of a parenthesised operand (`(x)|int` spans `x)|int`), and a call inserted inside
/// them would take the operand alone, not its filter. Counts parentheses outside string
/// literals.
fn with_parentheses(source: &str, (mut start, mut end): (usize, usize)) -> (usize, usize) {
    let bytes = source.as_bytes();
    let (mut unclosed, mut unopened) = (0usize, 0usize);
    let mut quote = None;
    let mut i = start;
    while i < end {
        let byte = bytes[i];
        match quote {
            Some(_) if byte == b'\\' => i += 1,
            Some(q) if byte == q => quote = None,
            Some(_) => {}
            None => match byte {
                b'\'' | b'"' => quote = Some(byte),
                b'(' => unclosed += 1,
                b')' if unclosed > 0 => unclosed -= 1,
                b')' => unopened += 1,
                _ => {}
            },
        }
        i += 1;
    }
    while unopened > 0 && start > 0 {
        start -= 1;
        match bytes[start] {
            b'(' => unopened -= 1,
            byte if byte.is_ascii_whitespace() => {}
            // Not a parenthesis around the operand: leave the range as the parser gave it.
            _ => return (start + 1, end),
        }
    }
    while unclosed > 0 && end < bytes.len() {
        match bytes[end] {
            b')' => unclosed -= 1,
            byte if byte.is_ascii_whitespace() => {}
            _ => break,
        }
        end += 1;
    }
    (start, end)
}

/// Where to count each piece of template text, and the count to insert there (`n` its bytes):
/// `{{ __raw(n) }}` inside the text, or for a `{% raw %}` block's, `{% do __raw(n) %}` right
/// before its tag (with the tag's own whitespace control, which then strips before the `do`).
fn raw_markers(source: &str, stmt: &ast::Stmt, markers: &mut Vec<(usize, String)>) {
    use ast::Stmt;
    let mut body = |body: &[ast::Stmt]| {
        for stmt in body {
            raw_markers(source, stmt, markers);
        }
    };
    match stmt {
        Stmt::Template(t) => body(&t.children),
        Stmt::EmitRaw(r) => {
            // The lexer's text is a slice of the source.
            let offset = (r.raw.as_ptr() as usize).wrapping_sub(source.as_ptr() as usize);
            let in_source = offset
                .checked_add(r.raw.len())
                .is_some_and(|end| end <= source.len());
            if !in_source {
                return;
            }
            let len = r.raw.len();
            if let Some(tag) = raw_block_tag(&source[..offset]) {
                let control = match source[tag + 2..].chars().next() {
                    Some(c @ ('-' | '+')) => c.to_string(),
                    _ => String::new(),
                };
                markers.push((tag, format!("{{%{control} do {RAW}({len}) %}}")));
                return;
            }
            if let Some(at) = text_marker(r.raw) {
                markers.push((offset + at, format!("{{{{ {RAW}({len}) }}}}")));
            }
        }
        Stmt::ForLoop(f) => {
            body(&f.body);
            body(&f.else_body);
        }
        Stmt::IfCond(c) => {
            body(&c.true_body);
            body(&c.false_body);
        }
        Stmt::WithBlock(w) => body(&w.body),
        Stmt::SetBlock(s) => body(&s.body),
        Stmt::AutoEscape(a) => body(&a.body),
        Stmt::FilterBlock(f) => body(&f.body),
        Stmt::Block(b) => body(&b.body),
        Stmt::Macro(m) => body(&m.body),
        Stmt::CallBlock(c) => body(&c.macro_decl.body),
        Stmt::EmitExpr(_)
        | Stmt::Set(_)
        | Stmt::Import(_)
        | Stmt::FromImport(_)
        | Stmt::Extends(_)
        | Stmt::Include(_)
        | Stmt::Do(_) => {}
    }
}

/// Where in template text a count can go without changing what it prints: after a letter or
/// digit (else after a printed character with no brace on either side: `{` before `{{` would
/// open an expression), inside what `trim_blocks`, `lstrip_blocks` and `-` cut at its ends; in
/// text of whitespace only (which exists only where no neighbouring tag strips it with `-`),
/// after its first character. `None` for text too short to count or of braces only.
fn text_marker(text: &str) -> Option<usize> {
    let after = |(at, c): (usize, char)| at + c.len_utf8();
    let brace = |c: Option<char>| matches!(c, Some('{' | '}'));
    if let Some(letter) = text.char_indices().find(|(_, c)| c.is_alphanumeric()) {
        return Some(after(letter));
    }
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let printed = (0..chars.len()).find(|&i| {
        let c = chars[i].1;
        !c.is_whitespace() && !brace(Some(c)) && !brace(chars.get(i + 1).map(|(_, c)| *c))
    });
    match printed {
        Some(i) => Some(after(chars[i])),
        None if text.chars().all(char::is_whitespace) => {
            let first = chars.first().map(|&c| after(c))?;
            (first < text.len()).then_some(first)
        }
        None => None,
    }
}

/// Where the `{% raw %}` tag starts, when text starting after `before` is a raw block's: the
/// last tag before it is `raw` (with any whitespace control).
fn raw_block_tag(before: &str) -> Option<usize> {
    let tag = before.trim_end().strip_suffix("%}")?;
    let start = tag.rfind("{%")?;
    let name = tag[start + 2..].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
    (name == "raw").then_some(start)
}

/// The filters that can build a value far larger than their input from small arguments, which
/// a render checks before it calls them: `replace` (a long `to` at every match), `indent` (a
/// width at every line), `join` (every item), `batch` (a count of fillers, allocated at once),
/// `format` (widths).
pub(super) const GROWING_FILTERS: [&str; 5] = ["replace", "indent", "join", "batch", "format"];

/// The bytes (or items) `filter` of `args` (the value first; keyword arguments last) would
/// build, over-estimated where that is cheap.
pub(super) fn filter_growth(filter: &str, args: &[Value]) -> usize {
    let (positional, kwargs) = match args.split_last() {
        Some((last, rest)) if last.is_kwargs() => (rest, Some(last)),
        _ => (args, None),
    };
    let arg = |i: usize| positional.get(i);
    let kwarg = |key: &str| {
        kwargs
            .and_then(|k| k.get_attr(key).ok())
            .filter(|v| !v.is_undefined())
    };
    let value = arg(0).map(text).unwrap_or_default();
    match filter {
        "replace" => replaced(
            &value,
            &arg(1).map(text).unwrap_or_default(),
            &arg(2).map(text).unwrap_or_default(),
        ),
        "indent" => {
            let width = arg(1).cloned().or_else(|| kwarg("width"));
            let width = width.and_then(|w| usize::try_from(w).ok()).unwrap_or(4);
            let lines = value.matches('\n').count() + 1;
            value.len().saturating_add(lines.saturating_mul(width))
        }
        "join" => joined(arg(0), &arg(1).map(text).unwrap_or_default()),
        "batch" => arg(1)
            .and_then(|c| usize::try_from(c.clone()).ok())
            .unwrap_or(0),
        "format" => formatted(&value, &positional[positional.len().min(1)..]),
        _ => 0,
    }
}

/// The bytes a string method of `value` (Python's, through pycompat) would build.
pub(super) fn method_growth(value: &Value, method: &str, args: &[Value]) -> usize {
    let Some(s) = value.as_str() else {
        return 0;
    };
    let arg = |i: usize| args.get(i).map(text).unwrap_or_default();
    match method {
        "replace" => replaced(s, &arg(0), &arg(1)),
        "join" => joined(args.first(), s),
        "format" => formatted(s, args),
        _ => 0,
    }
}

/// An error past `limit` for what `name` would build.
pub(super) fn check_growth(name: &str, bytes: usize, limit: usize) -> Result<(), Error> {
    match bytes > limit {
        true => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "`{name}` would build {bytes} bytes or items, over the {limit} the rendered \
                 prompt may hold"
            ),
        )),
        false => Ok(()),
    }
}

/// A value as the text a filter sees.
fn text(value: &Value) -> String {
    match value.as_str() {
        Some(s) => s.to_owned(),
        None => value.to_string(),
    }
}

fn replaced(s: &str, from: &str, to: &str) -> usize {
    let matches = match from.is_empty() {
        true => s.chars().count() + 1,
        false => s.matches(from).count(),
    };
    s.len()
        .saturating_add(matches.saturating_mul(to.len().saturating_sub(from.len())))
}

/// `items` joined by `separator`: a count of items past any bound is its own answer.
fn joined(items: Option<&Value>, separator: &str) -> usize {
    let Some(items) = items else { return 0 };
    if let Some(count) = items.len()
        && items.as_str().is_none()
        && count > (1 << 24)
    {
        return count;
    }
    match items.try_iter() {
        Ok(iter) => iter.fold(0usize, |bytes, item| {
            bytes
                .saturating_add(
                    item.as_str()
                        .map_or_else(|| item.to_string().len(), str::len),
                )
                .saturating_add(separator.len())
        }),
        Err(_) => 0,
    }
}

/// A format string with its arguments: their text and every width or precision it names.
fn formatted(format: &str, args: &[Value]) -> usize {
    let mut widths = 0usize;
    let mut digits = String::new();
    let mut in_spec = false;
    for c in format.chars() {
        match c {
            '%' | ':' | '.' => {
                in_spec = true;
                digits.clear();
            }
            '0'..='9' if in_spec => digits.push(c),
            '-' | '+' | ' ' | '#' | '<' | '>' | '^' | '=' if in_spec && digits.is_empty() => {}
            _ => {
                if in_spec && !digits.is_empty() {
                    widths = widths.saturating_add(digits.parse().unwrap_or(usize::MAX));
                }
                in_spec = false;
                digits.clear();
            }
        }
    }
    if in_spec && !digits.is_empty() {
        widths = widths.saturating_add(digits.parse().unwrap_or(usize::MAX));
    }
    args.iter()
        .map(|a| text(a).len())
        .fold(format.len().saturating_add(widths), usize::saturating_add)
}
