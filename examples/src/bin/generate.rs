//! Text generation from a model you have: a GGUF file or a Hugging Face decoder directory (any of
//! the crate's decoder families).
//!
//! ```text
//! generate --model SmolLM2-135M-Instruct.Q4_1.gguf --chat "What is the capital of France?"
//! generate --model path/to/hf-dir --prompt "Once upon a time"
//! generate --model path/to/hf-dir --interactive
//! ```
//!
//! `--prompt` is plain text, `--chat` one user message through the model's chat template,
//! `--interactive` a conversation on the terminal (history kept, each reply streamed; Ctrl-D
//! ends it), `--ids` token ids for a model without a tokenizer. Tokens are printed as they come
//! and tokens/s at the end; `--json` prints one JSON object instead:
//! `{prompt_ids, new_ids, text, prefill_s, decode_s, tokens_per_s, peak_rss_mb}`. `--weights f16`
//! (or `bf16`) stores the model's matrices in half the bytes, for faster decoding on flex;
//! `--weights q8` its `Linear` weights in 8-bit blocks (flex and ndarray). `--warmup` generates
//! once, untimed, before the generation it reports: a GPU backend compiles (and autotunes) its
//! kernels in its first pass of each shape, which would otherwise be in the figures.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use examples::device::{default_backend, device};
use models::{GenerationConfig, Message, Pretrained, WeightType};

#[derive(Parser, Debug)]
#[command(about = "Generate text from a GGUF file or a Hugging Face decoder directory.")]
struct Args {
    /// A GGUF file, or a directory with config.json and model.safetensors (tokenizer.json and a
    /// chat template when it has them).
    #[arg(long)]
    model: PathBuf,
    /// Backend: flex, ndarray, wgpu, tch, cuda, rocm or metal (those this binary was built with).
    #[arg(long, default_value = default_backend())]
    device: String,
    /// The type the model's matrices are stored in: f32; f16 or bf16 for half the bytes per
    /// token (flex, LibTorch and WGPU hold them); q8 for its `Linear` weights in 8-bit blocks,
    /// about a quarter of their bytes (flex and ndarray). The model computes in f32.
    #[arg(long, default_value_t = WeightType::F32)]
    weights: WeightType,
    /// The prompt as plain text, tokenised with the tokenizer's special tokens (BOS where the
    /// model adds one).
    #[arg(long, conflicts_with_all = ["ids", "chat", "interactive"])]
    prompt: Option<String>,
    /// One user message, through the model's chat template.
    #[arg(long, conflicts_with_all = ["ids", "interactive"])]
    chat: Option<String>,
    /// A conversation on the terminal: one line per message, Ctrl-D to end.
    #[arg(long, conflicts_with_all = ["ids", "json"])]
    interactive: bool,
    /// A system message before the conversation (--chat and --interactive).
    #[arg(long)]
    system: Option<String>,
    /// The prompt as comma-separated token ids.
    #[arg(long, value_delimiter = ',')]
    ids: Vec<u32>,
    /// Print one JSON object (prompt_ids, new_ids, text, prefill_s, decode_s, tokens_per_s,
    /// peak_rss_mb) instead of streaming.
    #[arg(long)]
    json: bool,
    /// New tokens at most.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Stop tokens are not chosen before this many new tokens.
    #[arg(long, default_value_t = 0)]
    min_new_tokens: usize,
    /// 0 is greedy; above 0, sampling at this temperature.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Sample among the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens whose probabilities sum to p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Generate once, untimed and unprinted, before the generation shown: a GPU backend's
    /// kernels are compiled in their first run, which is then not timed.
    #[arg(long, conflicts_with = "interactive")]
    warmup: bool,
    /// Stop tokens, comma-separated [default: the model's end-of-sequence tokens].
    #[arg(long, value_delimiter = ',')]
    stop: Vec<u32>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = device(&args.device)?;
    let loading = Instant::now();
    let pretrained = Pretrained::load_with_weights(&args.model, &device, args.weights)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let stop = match args.stop.is_empty() {
        true => pretrained.stop_tokens.clone(),
        false => args.stop.clone(),
    };
    let config = GenerationConfig::new()
        .with_max_new_tokens(args.max_new_tokens)
        .with_min_new_tokens(args.min_new_tokens)
        .with_temperature(args.temperature)
        .with_top_k(args.top_k)
        .with_top_p(args.top_p)
        .with_seed(args.seed)
        .with_stop_tokens(stop.clone());
    eprintln!(
        "{} ({} layers, {} weights) on {} in {:.1} s",
        pretrained.model_type,
        pretrained.model.blocks.len(),
        args.weights,
        args.device,
        loading.elapsed().as_secs_f64(),
    );
    let mut session = Session {
        pretrained: &pretrained,
        config: &config,
        stop: &stop,
        messages: args
            .system
            .iter()
            .map(|system| Message::new("system", system))
            .collect(),
    };

    if args.interactive {
        return session.converse();
    }
    let prompt = match (&args.prompt, &args.chat) {
        (Some(text), _) => session.encode(text, true)?,
        (None, Some(message)) => {
            session.messages.push(Message::new("user", message));
            session.chat_prompt()?
        }
        (None, None) if !args.ids.is_empty() => args.ids.clone(),
        (None, None) => {
            bail!("give a prompt: --prompt TEXT, --chat MESSAGE, --interactive or --ids 1,2,3")
        }
    };
    if args.warmup {
        session.generate(&prompt, false)?;
    }
    let stream = !args.json;
    let reply = session.generate(&prompt, stream)?;
    if args.json {
        let json = serde_json::json!({
            "prompt_ids": prompt,
            "new_ids": reply.ids,
            "text": reply.text,
            "prefill_s": reply.prefill.as_secs_f64(),
            "decode_s": reply.decode.as_secs_f64(),
            "tokens_per_s": reply.tokens_per_s(),
            "peak_rss_mb": examples::peak_rss_mb(),
        });
        println!("{json}");
    } else {
        println!();
        reply.report(prompt.len());
    }
    Ok(())
}

/// The model, the generation settings and the conversation so far.
struct Session<'a> {
    pretrained: &'a Pretrained,
    config: &'a GenerationConfig,
    stop: &'a [u32],
    messages: Vec<Message>,
}

/// What one generation gave.
struct Reply {
    ids: Vec<u32>,
    /// Decoded without the special tokens (ids when there is no tokenizer).
    text: String,
    /// The prompt's pass, up to the first new token.
    prefill: Duration,
    /// Every new token after the first.
    decode: Duration,
}

impl Reply {
    /// Tokens per second after the first.
    fn tokens_per_s(&self) -> f64 {
        self.ids.len().saturating_sub(1) as f64 / self.decode.as_secs_f64().max(1e-9)
    }

    fn report(&self, prompt_len: usize) {
        eprintln!(
            "{} new tokens after {prompt_len} in {:.3} s: {:.1} tokens/s after the first, which \
             took {:.1} ms with the prompt",
            self.ids.len(),
            (self.prefill + self.decode).as_secs_f64(),
            self.tokens_per_s(),
            self.prefill.as_secs_f64() * 1e3
        );
    }
}

impl Session<'_> {
    fn tokenizer(&self) -> anyhow::Result<&models::tokenizers::Tokenizer> {
        self.pretrained.tokenizer.as_ref().with_context(|| {
            format!(
                "{} has no tokenizer (tokenizer.json or tokenizer.ggml.*): give token ids with \
                 --ids",
                self.pretrained.path.display()
            )
        })
    }

    fn encode(&self, text: &str, add_special_tokens: bool) -> anyhow::Result<Vec<u32>> {
        Ok(self
            .tokenizer()?
            .encode(text, add_special_tokens)
            .map_err(|e| anyhow::anyhow!("tokenising the prompt: {e}"))?
            .get_ids()
            .to_vec())
    }

    /// The conversation through the chat template, ending with the assistant's header; its
    /// special tokens are in the text, so none is added (as `apply_chat_template` tokenises).
    fn chat_prompt(&self) -> anyhow::Result<Vec<u32>> {
        let template = self.pretrained.chat_template.as_ref().with_context(|| {
            format!(
                "{} has no chat template (chat_template.jinja, tokenizer_config.json's \
                 chat_template or tokenizer.chat_template): use --prompt",
                self.pretrained.path.display()
            )
        })?;
        let text = template.render(&self.messages, true)?;
        self.encode(&text, false)
    }

    /// Generates after `prompt`, printing the text as it comes when `stream`.
    fn generate(&self, prompt: &[u32], stream: bool) -> anyhow::Result<Reply> {
        let tokenizer = self.pretrained.tokenizer.as_ref();
        let mut out = std::io::stdout().lock();
        let mut ids: Vec<u32> = Vec::new();
        let mut printed = String::new();
        let started = Instant::now();
        let mut first_token = None;
        self.pretrained.model.try_generate_with(
            std::slice::from_ref(&prompt.to_vec()),
            self.config,
            |step| {
                let Some(token) = step.tokens[0] else {
                    return;
                };
                first_token.get_or_insert_with(|| started.elapsed());
                ids.push(token);
                if !stream {
                    return;
                }
                // Decoding the whole reply and printing what is new keeps multi-token characters
                // whole.
                match tokenizer {
                    Some(tokenizer) => {
                        if let Ok(text) = tokenizer.decode(&ids, true)
                            && text.starts_with(&printed)
                        {
                            let _ = write!(out, "{}", &text[printed.len()..]);
                            printed = text;
                        }
                    }
                    None => {
                        let _ = write!(out, "{token} ");
                    }
                }
                let _ = out.flush();
            },
        )?;
        let elapsed = started.elapsed();
        let prefill = first_token.unwrap_or(elapsed);
        let text = match tokenizer {
            Some(tokenizer) => tokenizer
                .decode(&ids, true)
                .map_err(|e| anyhow::anyhow!("decoding the reply: {e}"))?,
            None => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
        };
        Ok(Reply {
            ids,
            text,
            prefill,
            decode: elapsed - prefill,
        })
    }

    /// Reads a message per line from the terminal, answers each with the whole conversation as
    /// the prompt, until end of input.
    fn converse(&mut self) -> anyhow::Result<()> {
        // Fail before the first message rather than after it.
        self.tokenizer()?;
        if self.pretrained.chat_template.is_none() {
            self.chat_prompt()?;
        }
        eprintln!("One message per line; Ctrl-D ends the conversation.");
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        loop {
            eprint!("> ");
            let _ = std::io::stderr().flush();
            let Some(line) = lines.next() else {
                eprintln!();
                return Ok(());
            };
            let line = line.context("reading the terminal")?;
            if line.trim().is_empty() {
                continue;
            }
            self.messages.push(Message::new("user", line));
            let prompt = self.chat_prompt()?;
            let reply = self.generate(&prompt, true)?;
            println!();
            reply.report(prompt.len());
            let stopped = reply.ids.last().is_some_and(|id| self.stop.contains(id));
            if !stopped {
                eprintln!("(cut at --max-new-tokens {})", self.config.max_new_tokens);
            }
            self.messages
                .push(Message::new("assistant", reply.text.trim_end()));
        }
    }
}
