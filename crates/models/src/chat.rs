//! Chat templates: the Jinja template a model ships (`chat_template` in `tokenizer_config.json`,
//! `chat_template.jinja`, or `tokenizer.chat_template` in a GGUF file) rendered as transformers'
//! `apply_chat_template` renders it: with minijinja, blocks trimmed (`trim_blocks`,
//! `lstrip_blocks`), Python's string and dict methods (`.strip()`, `.items()`) that templates
//! call, `raise_exception` and `strftime_now`, and the special tokens as variables.

use std::path::Path;

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::error::ModelError;

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
}

impl ChatTemplate {
    /// Compiles `source` (Jinja); `bos_token` and `eos_token` are the strings templates see as
    /// variables of those names.
    pub fn new(
        source: &str,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, ModelError> {
        let mut environment = Environment::new();
        environment.set_trim_blocks(true);
        environment.set_lstrip_blocks(true);
        environment
            .set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        environment.add_function("raise_exception", raise_exception);
        environment.add_function("strftime_now", strftime_now);
        environment
            .add_template_owned("chat", source.to_owned())
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
        })
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
    /// `add_generation_prompt` (the model's turn next).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let template = self
            .environment
            .get_template("chat")
            .map_err(|e| ModelError::input("chat_template", "", e.to_string()))?;
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| {
                ModelError::input(
                    "messages",
                    messages.len(),
                    format!("could not be rendered by the chat template: {e:#}"),
                )
            })
    }
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
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

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
