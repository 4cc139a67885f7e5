"""``lemongraph token``: mint an API token (docs/operations.md, "Tokens")."""

from __future__ import annotations

import time

import click

from compiler import parse_duration
from stream.cli.common import DEV_SECRET_FILE
from stream.runtime.command import env_settings

__all__ = ["token"]


@click.command()
@click.option(
    "--source",
    type=click.Choice(["world", "agent", "tool"]),
    default="world",
    show_default=True,
    help="Stamped on every event sent with this token; agent events never count.",
)
@click.option(
    "--ttl",
    default="30d",
    show_default=True,
    help="How long it is valid (90s, 15m, 12h, 30d, 1d2h), or 'never'.",
)
@click.option(
    "--name", default="cli", show_default=True, help="Who it is for (shown in status lines)."
)
@click.option(
    "--approver",
    is_flag=True,
    help="The holder answers approvals (a world token only; docs/api.md, 'Approvals').",
)
def token(source: str, ttl: str, name: str, approver: bool) -> None:
    """Mint an API token signed with API_TOKEN_SECRET (when it is unset: with the
    secret a running `lemongraph dev` made up, from LEMONGRAPH_DATA_DIR); it is
    printed alone on the last line."""
    from stream.gateway import mint_token

    settings = env_settings()
    secret = settings.api_token_secret
    if not secret:
        # The secret a running `lemongraph dev` made up (see stream/cli/common.py, DEV_SECRET_FILE).
        dev_file = settings.data_dir / DEV_SECRET_FILE
        try:
            secret = dev_file.read_text(encoding="utf-8").strip()
        except OSError:
            secret = ""
        if not secret:
            raise click.ClickException(
                "API_TOKEN_SECRET is empty: set it (the gateway checks tokens with the same "
                f"secret); a running `lemongraph dev` writes its own to {dev_file}, which is "
                "not there"
            )
        click.echo(f"signed with the secret of `lemongraph dev` in {dev_file}", err=True)
    seconds: float | None = None
    if ttl.strip().lower() != "never":
        try:
            seconds = parse_duration(ttl).total_seconds()
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--ttl") from None
        if seconds <= 0:
            raise click.BadParameter("must be more than zero", param_hint="--ttl")
    if approver and source != "world":
        raise click.BadParameter("only a world token can be an approver's", param_hint="--approver")
    minted = mint_token(
        secret,
        now=time.time(),
        source=source,  # type: ignore[arg-type]  # click.Choice checked it
        name=name,
        ttl_seconds=seconds,
        approver=approver,
    )
    expiry = "never expires" if seconds is None else f"valid for {ttl}"
    role = ", approver" if approver else ""
    click.echo(f"token for {name!r}, source {source}{role}, {expiry}:", err=True)
    click.echo(minted)
