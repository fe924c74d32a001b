// The Mini App: reads the card named by the start parameter with the user's initData.
"use strict";
const tg = window.Telegram ? window.Telegram.WebApp : null;
if (tg) { tg.ready(); tg.expand(); }
