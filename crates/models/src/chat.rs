//! Chat templates: the Jinja template a model ships (`chat_template` in `tokenizer_config.json`,
//! `chat_template.jinja`, or `tokenizer.chat_template` in a GGUF file) rendered as transformers'
//! `apply_chat_template` renders it: with minijinja, blocks trimmed (`trim_blocks`,
//! `lstrip_blocks`), Python's string and dict methods (`.strip()`, `.items()`) that templates
//! call, `raise_exception` and `strftime_now`, and the special tokens as variables.
//!
//! A template is code from whoever made the file, so a render is bounded ([`TemplateLimits`]):
//! in steps (minijinja's fuel), in the bytes it writes, in how deep its macros and includes
//! recurse, and, before it is compiled, in its size and in the code of any one tag (the compiler
//! recurses once per filter, attribute or operator in a chain). It has no loader, so it reads no
//! file and no other template; no function it can call reaches the filesystem or the network.
//! Its divisions are checked for zero and the values it builds held to the output's bound
//! ([`guards`]).

mod guards;

use std::io::Write;
use std::path::Path;

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::error::ModelError;

/// What a chat template may cost. Each bound is well past what the real templates measured use
/// (docs/design.md, "Files from strangers"): the largest of them is 17 KB (the source bound is 60
/// times that), the longest tag of any holds 170 bytes of code (24 times under the tag bound),
/// and their renders take 23 to 96 steps a message (the step bound allows 100,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateLimits {
    /// The longest template source, in bytes.
    pub max_source_bytes: usize,
    /// The most code (bytes outside string literals) in one `{{ }}` or `{% %}` tag.
    pub max_tag_code_bytes: usize,
    /// The steps every render may take (minijinja's fuel: about one per instruction) ...
    pub base_steps: u64,
    /// ... and the steps it may take in addition for each message.
    pub steps_per_message: u64,
    /// The bytes every rendered prompt may hold ...
    pub base_rendered_bytes: usize,
    /// ... and the bytes in addition for each byte of the messages' text.
    pub rendered_bytes_per_message_byte: usize,
    /// How deep the render's frames may nest (minijinja's recursion limit, 500 at most: a macro
    /// calling itself takes about 7 frames a level, one with a loop inside; the VM's frames live
    /// on the native stack, and 500 of them fit in 512 KiB).
    pub max_depth: usize,
}

impl Default for TemplateLimits {
    fn default() -> Self {
        Self {
            max_source_bytes: 1 << 20,
            max_tag_code_bytes: 4096,
            base_steps: 10_000_000,
            steps_per_message: 100_000,
            base_rendered_bytes: 16 << 20,
            rendered_bytes_per_message_byte: 4,
            max_depth: 500,
        }
    }
}

impl TemplateLimits {
    /// The steps a render of `messages` may take.
    fn steps(&self, messages: &[Message]) -> u64 {
        self.base_steps
            .saturating_add(self.steps_per_message.saturating_mul(messages.len() as u64))
    }

    /// The bytes a render of `messages` may write.
    fn rendered_bytes(&self, messages: &[Message]) -> usize {
        let text: usize = messages
            .iter()
            .map(|m| m.role.len() + m.content.len())
            .sum();
        self.base_rendered_bytes
            .saturating_add(self.rendered_bytes_per_message_byte.saturating_mul(text))
    }
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant` (what the template knows).
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message of `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A model's chat template, compiled.
#[derive(Debug)]
pub struct ChatTemplate {
    environment: Environment<'static>,
    bos_token: String,
    eos_token: String,
    limits: TemplateLimits,
}

impl ChatTemplate {
    /// Compiles `source` (Jinja); `bos_token` and `eos_token` are the strings templates see as
    /// variables of those names. Bounded by the default [`TemplateLimits`].
    pub fn new(
        source: &str,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, ModelError> {
        Self::with_limits(source, bos_token, eos_token, TemplateLimits::default())
    }

    /// [`ChatTemplate::new`] under `limits`.
    pub fn with_limits(
        source: &str,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
        limits: TemplateLimits,
    ) -> Result<Self, ModelError> {
        if source.len() > limits.max_source_bytes {
            return Err(ModelError::input(
                "chat_template",
                excerpt(source),
                format!(
                    "chat template: {} bytes, over the {} a template may hold",
                    source.len(),
                    limits.max_source_bytes
                ),
            ));
        }
        if let Some(tag) = longest_tag(source).filter(|t| t.code_bytes > limits.max_tag_code_bytes)
        {
            return Err(ModelError::input(
                "chat_template",
                excerpt(&source[tag.start..]),
                format!(
                    "chat template: a tag with {} bytes of code (at byte {}), over the {} one tag \
                     may hold",
                    tag.code_bytes, tag.start, limits.max_tag_code_bytes
                ),
            ));
        }
        let guarded = guards::guarded(source).map_err(|e| {
            ModelError::input(
                "chat_template",
                excerpt(source),
                format!("is not valid Jinja: {e}"),
            )
        })?;
        let mut environment = Environment::new();
        environment.set_trim_blocks(true);
        environment.set_lstrip_blocks(true);
        environment.set_recursion_limit(limits.max_depth);
        environment
            .set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        environment.add_function("raise_exception", raise_exception);
        environment.add_function("strftime_now", strftime_now);
        environment.add_function(guards::DIVISOR, guards::divisor);
        environment
            .add_template_owned("chat", guarded)
            .map_err(|e| {
                ModelError::input(
                    "chat_template",
                    excerpt(source),
                    format!("is not valid Jinja: {e}"),
                )
            })?;
        Ok(Self {
            environment,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
            limits,
        })
    }

    /// The bounds this template renders under.
    pub fn limits(&self) -> TemplateLimits {
        self.limits
    }

    /// The template of a Hugging Face model directory: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template` (a string, or a list of named templates, of
    /// which `default` is taken), with that file's `bos_token` / `eos_token`; `None` when the
    /// directory has none.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Option<Self>, ModelError> {
        let dir = dir.as_ref();
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match config_path.is_file() {
            true => {
                let text = std::fs::read_to_string(&config_path).map_err(|e| {
                    ModelError::input("path", &config_path, format!("cannot be read: {e}"))
                })?;
                serde_json::from_str(&text).map_err(|e| {
                    ModelError::input("path", &config_path, format!("is not JSON: {e}"))
                })?
            }
            false => serde_json::Value::Null,
        };
        let jinja = dir.join("chat_template.jinja");
        let source =
            match jinja.is_file() {
                true => Some(std::fs::read_to_string(&jinja).map_err(|e| {
                    ModelError::input("path", &jinja, format!("cannot be read: {e}"))
                })?),
                false => match config.get("chat_template") {
                    None | Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(source)) => Some(source.clone()),
                    Some(serde_json::Value::Array(named)) => named
                        .iter()
                        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                        .and_then(|t| t.get("template")?.as_str())
                        .map(str::to_owned),
                    Some(other) => {
                        return Err(ModelError::input(
                            "chat_template",
                            excerpt(&other.to_string()),
                            "must be a string or a list of {name, template}",
                        ));
                    }
                },
            };
        let token = |key: &str| -> String {
            match config.get(key) {
                Some(serde_json::Value::String(token)) => token.clone(),
                // `{"content": "<s>", ...}` as older tokenizers write an AddedToken
                Some(serde_json::Value::Object(added)) => added
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                _ => String::new(),
            }
        };
        source
            .map(|source| Self::new(&source, token("bos_token"), token("eos_token")))
            .transpose()
    }

    /// The prompt of `messages`: the rendered text, ending with the assistant's header when
    /// `add_generation_prompt` (the model's turn next). A render past the template's
    /// [`TemplateLimits`] stops there with an error saying which bound it crossed.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let steps = self.limits.steps(messages);
        let mut output = BoundedWriter {
            bytes: Vec::new(),
            limit: self.limits.rendered_bytes(messages),
            exceeded: false,
        };
        // Fuel belongs to an environment, and this bound grows with the messages: each render
        // sets it on its own copy (which shares the compiled template).
        let mut environment = self.environment.clone();
        environment.set_fuel(Some(steps));
        // No value the template builds may be larger than the prompt it may render, and all
        // it emits, captures included, is counted.
        let limit = output.limit;
        environment.add_function(guards::BOUNDED, move |value: Value| {
            guards::bounded(value, limit)
        });
        let emitted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let budget = limit.saturating_mul(guards::EMITTED_PER_RENDERED);
        let counted = emitted.clone();
        environment.add_function(guards::RAW, move |bytes: usize| {
            guards::count(&counted, bytes, budget).map(|()| Value::from(""))
        });
        // The filters and methods that can build far more than their input are checked first.
        for name in guards::GROWING_FILTERS {
            let builtin = match name {
                "replace" => Value::from_function(minijinja::filters::replace),
                "indent" => Value::from_function(minijinja::filters::indent),
                "join" => Value::from_function(minijinja::filters::join),
                "batch" => Value::from_function(minijinja::filters::batch),
                _ => Value::from_function(minijinja::filters::format),
            };
            environment.add_filter(
                name,
                move |state: &minijinja::State, args: minijinja::value::Rest<Value>| {
                    guards::check_growth(name, guards::filter_growth(name, &args), limit)?;
                    builtin.call(state, &args)
                },
            );
        }
        environment.set_unknown_method_callback(move |state, value, method, args| {
            guards::check_growth(method, guards::method_growth(value, method, args), limit)?;
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });
        environment.set_formatter(move |out, state, value| {
            let bytes = match value.as_str() {
                Some(text) => text.len(),
                None => value.to_string().len(),
            };
            guards::count(&emitted, bytes, budget)?;
            minijinja::escape_formatter(out, state, value)
        });
        let template = environment
            .get_template("chat")
            .map_err(|e| ModelError::input("chat_template", "", e.to_string()))?;
        let result = template.render_captured_to(
            minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            },
            &mut output,
        );
        let bound = |why: String| ModelError::input("messages", messages.len(), why);
        match result {
            Ok(_) => String::from_utf8(output.bytes)
                .map_err(|e| bound(format!("the chat template rendered invalid UTF-8: {e}"))),
            Err(_) if output.exceeded => Err(bound(format!(
                "rendered prompt over {} bytes (the chat template's bound for these messages)",
                output.limit
            ))),
            Err(e) if out_of_fuel(&e) => Err(bound(format!(
                "chat template: more than {steps} steps (its bound for {} messages)",
                messages.len()
            ))),
            Err(e) => Err(bound(format!(
                "could not be rendered by the chat template: {}",
                with_causes(&e)
            ))),
        }
    }
}

/// `error` and the errors beneath it (an include's, a macro's), which minijinja keeps as sources.
fn causes(error: &minijinja::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
}

/// Whether `error`, or an error beneath it (inside an include), is minijinja's out of fuel.
fn out_of_fuel(error: &minijinja::Error) -> bool {
    causes(error).any(|e| {
        e.downcast_ref::<minijinja::Error>()
            .is_some_and(|e| e.kind() == ErrorKind::OutOfFuel)
    })
}

/// A render's error and the errors beneath it: `could not render include` alone does not say
/// that the depth was passed.
fn with_causes(error: &minijinja::Error) -> String {
    let mut text = format!("{error:#}");
    for inner in causes(error).skip(1) {
        text.push_str(&format!("; caused by: {inner}"));
    }
    text
}

/// A prompt's bytes, refused past `limit`.
struct BoundedWriter {
    bytes: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl Write for BoundedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other(
                "the rendered prompt is over its bound",
            ));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where a tag starts and how much code (bytes outside string literals) it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tag {
    start: usize,
    code_bytes: usize,
}

/// The tag (`{{ }}` or `{% %}`) of `source` with the most code, skipping comments and the text
/// of `{% raw %}` blocks; an unterminated tag runs to the end. Counted on the source as written:
/// the compiler's recursion is bounded by the length of a tag's code, whatever it parses to.
fn longest_tag(source: &str) -> Option<Tag> {
    let bytes = source.as_bytes();
    let mut longest: Option<Tag> = None;
    let mut at = 0;
    while at + 1 < bytes.len() {
        if bytes[at] != b'{' || !matches!(bytes[at + 1], b'{' | b'%' | b'#') {
            at += 1;
            continue;
        }
        let open = bytes[at + 1];
        let start = at;
        at += 2;
        if open == b'#' {
            at = find(bytes, at, b"#}").map_or(bytes.len(), |end| end + 2);
            continue;
        }
        let close: &[u8] = if open == b'{' { b"}}" } else { b"%}" };
        let mut code = 0;
        let mut quote = None;
        // Brackets open in the tag: `}}` inside `{{ {'a': {'b': 1}} }}` closes a dict, not the
        // tag. Counting past where the lexer would end a tag only counts more.
        let mut open_brackets = 0usize;
        let code_start = at;
        while at < bytes.len() {
            let b = bytes[at];
            match quote {
                Some(q) => {
                    if b == b'\\' {
                        at += 1;
                    } else if b == q {
                        quote = None;
                    }
                }
                None if b == b'\'' || b == b'"' => quote = Some(b),
                None if open_brackets == 0 && bytes[at..].starts_with(close) => break,
                None => {
                    match b {
                        b'(' | b'[' | b'{' => open_brackets += 1,
                        b')' | b']' | b'}' => open_brackets = open_brackets.saturating_sub(1),
                        _ => {}
                    }
                    code += 1;
                }
            }
            at += 1;
        }
        at = (at + 2).min(bytes.len());
        if open == b'%' && first_word(&bytes[code_start..]) == b"raw" {
            // The block's text up to `{% endraw %}` is not code, whatever it holds.
            let mut from = at;
            at = bytes.len();
            while let Some(tag) = find(bytes, from, b"{%") {
                if first_word(&bytes[tag + 2..]) == b"endraw" {
                    at = tag;
                    break;
                }
                from = tag + 2;
            }
        }
        if longest.is_none_or(|l| code > l.code_bytes) {
            longest = Some(Tag {
                start,
                code_bytes: code,
            });
        }
    }
    longest
}

/// The first word of a tag's code: `raw` in `{%- raw %}`.
fn first_word(code: &[u8]) -> &[u8] {
    let start = code
        .iter()
        .position(|b| !matches!(b, b'-' | b'+' | b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(code.len());
    let code = &code[start..];
    let end = code
        .iter()
        .position(|b| !b.is_ascii_alphanumeric() && *b != b'_')
        .unwrap_or(code.len());
    &code[..end]
}

/// The first `needle` in `bytes` at or after `from`.
fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| from + i)
}

/// The first line of a template, for messages.
fn excerpt(source: &str) -> String {
    source.chars().take(80).collect()
}

/// Templates call `raise_exception("...")` to refuse a conversation (a system message in the
/// wrong place, roles out of order); the message becomes the render's error.
fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `strftime_now(format)`: today's date (UTC) in `format`, for templates that print
/// it (Llama 3.1's "Today Date"). `%d %b %B %m %Y %y %H %M %S %%` are supported.
fn strftime_now(format: String) -> Result<Value, minijinja::Error> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Value::from(strftime(&format, seconds)))
}

/// `format` filled in for `seconds` since the Unix epoch (UTC).
fn strftime(format: &str, seconds: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = (seconds / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let time = seconds % 86_400;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('b') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('H') => out.push_str(&format!("{:02}", time / 3600)),
            Some('M') => out.push_str(&format!("{:02}", time / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", time % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-Instruct's template (ChatML with a default system prompt), as its GGUF carries it.
    const SMOLLM2: &str = include_str!("../tests/gguf/smollm2_chat_template.jinja");

    #[test]
    fn renders_chatml_with_the_default_system_prompt_and_the_generation_header() {
        let template = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let text = template
            .render(&[Message::new("user", "Hi")], true)
            .unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
             Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = template
            .render(
                &[
                    Message::new("system", "Be brief."),
                    Message::new("user", "Hi"),
                ],
                false,
            )
            .unwrap();
        assert_eq!(
            with_system,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn templates_use_python_methods_trimmed_blocks_and_raise_exception() {
        let source = "{% for m in messages %}\n  {% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Unknown role: ' + m.role) }}{% endif %}\n  [{{ m.role.upper() }}] {{ m.content.strip() }}\n{% endfor %}";
        let template = ChatTemplate::new(source, "<s>", "</s>").unwrap();
        let text = template
            .render(&[Message::new("user", "  hello  ")], false)
            .unwrap();
        // `lstrip_blocks` strips before block tags only: the text line keeps its indent, as
        // Python's Jinja2 renders it.
        assert_eq!(text, "  [USER] hello\n");
        let err = template
            .render(&[Message::new("tool", "x")], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Unknown role: tool"), "{err}");
        let err = ChatTemplate::new("{% for %}", "", "")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("chat_template") && err.contains("not valid Jinja"),
            "{err}"
        );
    }

    fn render_error(source: &str, messages: &[Message]) -> String {
        ChatTemplate::new(source, "", "")
            .unwrap()
            .render(messages, true)
            .unwrap_err()
            .to_string()
    }

    /// Loops that would take 10^10 and 10^15 steps, and a loop over the messages nested four
    /// deep (10^12 for 1,000 messages), stop at the step bound with its number.
    #[test]
    fn renders_stop_at_the_step_bound() {
        let limits = TemplateLimits::default();
        let one = [Message::new("user", "Hi")];
        for source in [
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) \
             %}{% endfor %}{% endfor %}{% endfor %}",
        ] {
            let err = render_error(source, &one);
            let want = format!("chat template: more than {} steps", limits.steps(&one));
            assert!(err.contains(&want), "{err}");
        }
        let many = vec![Message::new("user", "Hi"); 1000];
        let err = render_error(
            "{% for a in messages %}{% for b in messages %}{% for c in messages %}{% for d in \
             messages %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}",
            &many,
        );
        let want = format!("chat template: more than {} steps", limits.steps(&many));
        assert!(err.contains(&want), "{err}");
    }

    /// Two bytes printed 10^10 times, and 10 MB strings printed 10^5 times (10^12 bytes), stop at
    /// the rendered-size bound; a prompt just under it renders.
    #[test]
    fn renders_stop_at_the_size_bound() {
        let one = [Message::new("user", "Hi")];
        let limit = TemplateLimits::default().rendered_bytes(&one);
        for source in [
            "{% for i in range(100000) %}{% for j in range(100000) %}ab{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}",
        ] {
            let err = render_error(source, &one);
            assert!(
                err.contains(&format!("rendered prompt over {limit} bytes"))
                    || err.contains("chat template: more than"),
                "{err}"
            );
        }
        let err = render_error(
            "{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}",
            &one,
        );
        assert!(
            err.contains(&format!("rendered prompt over {limit} bytes")),
            "{err}"
        );
        let just_under = format!("{{{{ 'x' * {} }}}}", limit - 1);
        let text = ChatTemplate::new(&just_under, "", "")
            .unwrap()
            .render(&one, false)
            .unwrap();
        assert_eq!(text.len(), limit - 1);
        // The bound grows with the conversation: four bytes for each byte of its text.
        let long = [Message::new("user", "y".repeat(limit))];
        let echo = ChatTemplate::new("{{ messages[0].content }}{{ messages[0].content }}", "", "")
            .unwrap()
            .render(&long, false)
            .unwrap();
        assert_eq!(echo.len(), 2 * limit);
    }

    /// A zero divisor is Jinja's ZeroDivisionError, not minijinja's `inf` or NaN; other divisions
    /// compute as before.
    #[test]
    fn division_by_zero_is_an_error() {
        let one = [Message::new("user", "Hi")];
        for source in [
            "{{ 1 / 0 }}",
            "{{ 1.5 // 0.0 }}",
            "{% set x = 0 %}{{ 5 / x }}",
            "{{ 3 / (messages|length - 1) }}",
            "{{ 3 / ('0.4'|float)|int }}",
            "{{ [1, 2]|map('string')|join(1 / 0) }}",
        ] {
            let err = render_error(source, &one);
            assert!(err.contains("division by zero"), "{source}: {err}");
        }
        let render = |source: &str| {
            ChatTemplate::new(source, "", "")
                .unwrap()
                .render(&one, false)
                .unwrap()
        };
        assert_eq!(render("{{ 1 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }}"), "0.5 3 1");
        assert_eq!(
            render("{{ (messages|length / 2)|int }}|{{ 'a' ~ 'b'|upper }}"),
            "0|aB"
        );
        // Long chains written flat stay flat: one check around each chain, not one per link
        // (nested past the parser's depth, they would refuse the template).
        let concat = format!("{{{{ 'a'{} }}}}", " ~ 'a'".repeat(299));
        assert_eq!(render(&concat), "a".repeat(300));
        let filters = format!("{{{{ 'A'{} }}}}", "|lower|upper".repeat(200));
        assert_eq!(render(&filters), "A");
        let sums = format!("{{{{ 1{} }}}}", " + 1 * 1".repeat(299));
        assert_eq!(render(&sums), "300");
    }

    /// A value built past the output's bound without being printed (a string doubled in a loop
    /// by `~`, `+` or a filter, a macro doubling its argument, a list of 2^40 items) stops at
    /// the first value over the bound, naming it.
    #[test]
    fn values_past_the_output_bound_are_errors() {
        let one = [Message::new("user", "Hi")];
        let limit = TemplateLimits::default().rendered_bytes(&one);
        let doubled = |step: &str| {
            format!(
                "{{% set ns = namespace(s='ab') %}}{{% for _ in range(40) %}}{{% set ns.s = {step} \
                 %}}{{% endfor %}}{{{{ ns.s|length }}}}"
            )
        };
        for source in [
            doubled("ns.s ~ ns.s"),
            doubled("ns.s + ns.s"),
            doubled("[ns.s, ns.s]|join"),
            doubled("ns.s.replace('a', 'aa')"),
            "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif \
             %}{% endmacro %}{{ d('x', 40) }}"
                .to_owned(),
            "{{ ([0] * 2 ** 40)|list|length }}".to_owned(),
            // One step from small arguments: checked before the filter or method runs.
            "{{ ('a' * 10000000)|replace('a', 'a' * 10000000) }}".to_owned(),
            "{{ ('a' * 10000000).replace('a', 'a' * 10000000) }}".to_owned(),
            "{{ 'a\nb'|indent(10 ** 12) }}".to_owned(),
            "{{ 'a\nb'|indent(width=10 ** 12) }}".to_owned(),
            "{{ [1]|batch(10 ** 15)|list }}".to_owned(),
            "{{ (['x' * 10000000] * 100)|join }}".to_owned(),
            "{{ ','.join(['x' * 10000000] * 100) }}".to_owned(),
            "{{ '%1000000000000d'|format(1) }}".to_owned(),
            "{{ '{:>1000000000000}'.format(1) }}".to_owned(),
        ] {
            let err = render_error(&source, &one);
            assert!(
                err.contains(&format!("over the {limit} the rendered prompt may hold")),
                "{source}: {err}"
            );
        }
        // The same filters and methods at ordinary sizes compute as before.
        let render = |source: &str| {
            ChatTemplate::new(source, "", "")
                .unwrap()
                .render(&one, false)
                .unwrap()
        };
        assert_eq!(
            render(
                "{{ 'ab'|replace('b', 'c') }} {{ 'ab'.replace('a', 'x') }} {{ 'a\nb'|indent(2) }} \
                 {{ 'a\nb'|indent(width=1, first=true) }} {{ [1, 2, 3]|batch(2, 0)|list }} \
                 {{ ['a', 'b']|join('-') }} {{ '-'.join(['c', 'd']) }} {{ '%3d'|format(7) }} \
                 {{ '{:>3}'.format(7) }}"
            ),
            "ac xb a\n  b  a\n b [[1, 2], [3, 0]] a-b c-d   7   7"
        );
    }

    /// A template in the manner of Qwen 2.5's: whitespace control on every tag, indented.
    const QWEN_STYLE: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

    /// What a loop emits into a capture, a macro's body or a filter block, never printed
    /// whole, is counted like the prompt: 10 MB a time 100,000 times stops at the emission
    /// budget, for expressions and for template text; output is the same with the counting.
    #[test]
    fn captures_are_counted_as_they_fill() {
        let one = [Message::new("user", "Hi")];
        let budget = TemplateLimits::default().rendered_bytes(&one) * guards::EMITTED_PER_RENDERED;
        let text = "y".repeat(4000);
        for source in [
            "{% set big = 'x' * 10000000 %}{% set t %}{% for i in range(100000) %}{{ big }}\
             {% endfor %}{% endset %}{{ t|length }}"
                .to_owned(),
            "{% set big = 'x' * 10000000 %}{% macro m() %}{% for i in range(100000) %}{{ big }}\
             {% endfor %}{% endmacro %}{{ m()|length }}"
                .to_owned(),
            format!(
                "{{% filter upper %}}{{% for i in range(100000) %}}{{% for j in range(100) %}}\
                 {text}{{% endfor %}}{{% endfor %}}{{% endfilter %}}"
            ),
            format!(
                "{{% set t %}}{{% for i in range(100000) %}}{{% for j in range(100) %}}\
                 {spaces}{{% endfor %}}{{% endfor %}}{{% endset %}}{{{{ t|length }}}}",
                spaces = " ".repeat(4000)
            ),
            format!(
                "{{% set t %}}{{% for i in range(100000) %}}{{% for j in range(100) %}}\
                 {{% raw %}}{text}{{% endraw %}}{{% endfor %}}{{% endfor %}}{{% endset %}}{{{{ t|length }}}}"
            ),
        ] {
            let err = render_error(&source, &one);
            assert!(
                err.contains(&format!("more than {budget} bytes emitted")),
                "{}: {err}",
                &source[..60]
            );
        }
        // Text keeps its whitespace control (the count sits after its first printed
        // character): the same output as minijinja without the guards, a Qwen 2.5-style
        // template included.
        let one = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
            Message::new("assistant", "Hello."),
        ];
        let plain = |source: &str| {
            let mut environment = Environment::new();
            environment.set_trim_blocks(true);
            environment.set_lstrip_blocks(true);
            environment.add_template("t", source).unwrap();
            let template = environment.get_template("t").unwrap();
            template
                .render(minijinja::context! { messages => &one, add_generation_prompt => true })
                .unwrap()
        };
        for source in [
            "{% for m in messages %}\n  <{{ m.role }}>  {%- if true %} x {% endif -%}\n  !\n{% endfor %}",
            "{%- for m in messages -%}\n\t{{- m.content -}}\n  é {# c #}  \n{% endfor %}\n",
            "  {% raw %} {{ raw }} {% endraw %}\n{%+ if true %}\n a{% endif %}",
            "a\n    {%- raw %} {{ x }}\n{% endraw -%}\n  b\n  {%+ raw -%}  c  {%- endraw %}\n d",
            "{% macro m(x) -%}\n  [{{ x }}]\n{%- endmacro %}{% set t %} {{ m(1) }} z{% endset %}{{ t }}",
            QWEN_STYLE,
            // Braces in text (Gemma 4's tool declarations): no count lands beside one.
            "{{- 'f' -}}{description:<|\"|>{{- 'd' -}}<|\"|>}\n{% if true %}{{ '{' }}{{ 1 }}}{% endif %}",
            "{% if true %}\n\n\n    {% endif %}|{% if true %}  \t  {% endif %}|{% if true -%}\n  \n  {%- endif %}|\n  {% if true %} {% endif %}",
        ] {
            let rendered = ChatTemplate::new(source, "", "")
                .unwrap()
                .render(&one, true)
                .unwrap();
            assert_eq!(rendered, plain(source), "{source:?}");
        }
    }

    /// A macro calling itself, a template including itself, and one including a file: the first
    /// two stop at the depth bound, the third finds no template (there is no loader); 30 levels
    /// of a macro with a loop in it render.
    #[test]
    fn recursion_is_bounded_and_no_file_is_read() {
        let one = [Message::new("user", "Hi")];
        // On a thread with Rust's default 2 MiB of stack: the bound comes before the stack's end.
        let err = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                render_error(
                    "{% macro f(n) %}{% for i in [n] %}{{ f(n + 1) }}{% endfor %}{% endmacro %}\
                     {{ f(0) }}",
                    &[Message::new("user", "Hi")],
                )
            })
            .unwrap()
            .join()
            .expect("the render's thread died");
        assert!(err.contains("recursion"), "{err}");
        let err = render_error("x{% include 'chat' %}", &one);
        assert!(err.contains("recursion"), "{err}");
        for source in [
            "{% include '/etc/passwd' %}",
            "{% import '/etc/hostname' as h %}",
            "{% extends '../Cargo.toml' %}",
        ] {
            let err = render_error(source, &one);
            assert!(err.contains("not found"), "{source}: {err}");
        }
        // The depth real templates use renders: gpt-oss's renders a tool's JSON schema with a
        // macro that calls itself for each nested object, a loop over its properties between.
        let nested = "{% macro f(n) %}{% if n > 0 %}{% for i in [n] %}({{ f(n - 1) }}){% endfor \
                      %}{% endif %}{% endmacro %}{{ f(30) }}";
        let text = ChatTemplate::new(nested, "", "")
            .unwrap()
            .render(&one, false)
            .unwrap();
        assert_eq!(text, format!("{}{}", "(".repeat(30), ")".repeat(30)));
    }

    /// Before compiling: a template over the size bound, and a tag with more code than the
    /// bound (a chain of 100,000 filters, which would overflow the compiler's stack), are
    /// refused with the bound's number. Chains of every kind at the bound compile (or are
    /// syntax errors) on a thread with 2 MiB of stack, Rust's default for a spawned thread.
    #[test]
    fn sources_and_tags_are_bounded_before_compiling() {
        let limits = TemplateLimits::default();
        let err = ChatTemplate::new(&"x".repeat(limits.max_source_bytes + 1), "", "")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "over the {} a template may hold",
                limits.max_source_bytes
            )),
            "{err}"
        );
        let chain = format!("{{{{ x{} }}}}", "|e".repeat(100_000));
        let err = ChatTemplate::new(&chain, "", "").unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "over the {} one tag may hold",
                limits.max_tag_code_bytes
            )),
            "{err}"
        );
        // Literals, comments and raw blocks are not code; brackets hold a tag open.
        let text_only = format!(
            "{{{{ '{long}' }}}}{{# {long} #}}{{% raw %}}{{{{ {long} }}}}{{% endraw %}}",
            long = "|e".repeat(10_000)
        );
        assert!(ChatTemplate::new(&text_only, "", "").is_ok());
        let in_brackets = format!("{{{{ {{'a': {{'b': 1}}}} {} }}}}", "|e".repeat(10_000));
        assert!(ChatTemplate::new(&in_brackets, "", "").is_err());
        let max = limits.max_tag_code_bytes;
        let chains = [
            format!("{{{{ x{} }}}}", "|e".repeat(max / 2 - 2)),
            format!("{{{{ x{} }}}}", ".a".repeat(max / 2 - 2)),
            format!("{{{{ x{} }}}}", "~x".repeat(max / 2 - 2)),
            format!("{{{{ x{} }}}}", "[0]".repeat(max / 3 - 2)),
            format!("{{{{ 1{} }}}}", "+1".repeat(max / 2 - 2)),
            format!("{{{{ {}1 }}}}", "- ".repeat(max / 2 - 2)),
            format!("{{{{ {}x }}}}", "not ".repeat(max / 4 - 2)),
            format!(
                "{{{{ {}1{} }}}}",
                "(".repeat(max / 2 - 2),
                ")".repeat(max / 2 - 2)
            ),
            format!(
                "{{{{ {}1{} }}}}",
                "[".repeat(max / 2 - 2),
                "]".repeat(max / 2 - 2)
            ),
            format!("{{{{ x{} }}}}", "()".repeat(max / 2 - 2)),
            format!(
                "{{{{ x if x else{} x }}}}",
                " x if x else".repeat(max / 12 - 4)
            ),
        ];
        for source in chains {
            let compiled = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || ChatTemplate::new(&source, "", "").map(|_| ()))
                .unwrap()
                .join();
            assert!(compiled.is_ok(), "the compiler's thread died");
        }
    }

    /// The real templates' bounds leave room: SmolLM2's template renders a conversation of
    /// 10,000 messages.
    #[test]
    fn a_long_conversation_renders_within_the_bounds() {
        let template = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let messages: Vec<Message> = (0..10_000)
            .map(|i| Message::new(["user", "assistant"][i % 2], format!("turn {i}")))
            .collect();
        let text = template.render(&messages, true).unwrap();
        assert!(text.ends_with("<|im_start|>assistant\n"));
        assert_eq!(text.matches("<|im_end|>").count(), 10_001);
    }

    #[test]
    fn strftime_formats_a_known_date() {
        // 2024-07-23 12:34:56 UTC
        assert_eq!(
            strftime("%d %b %Y, %B %m %y %H:%M:%S %%", 1_721_738_096),
            "23 Jul 2024, July 07 24 12:34:56 %"
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
