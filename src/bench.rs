//! Benchmarks printed by `twinops bench`.

#[derive(clap::Args)]
pub struct ToolsBenchArgs {}

pub fn tools(_args: &ToolsBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
