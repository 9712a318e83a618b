const classes=["chat","paid","trial","free"];
const colors={incoming:"#f59e0b",admitted:"#2563eb",limit:"#b42318",allowed:"#f4a7a0",chat:"#7c3aed",paid:"#059669",trial:"#0ea5e9",free:"#94a3b8"};
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]))}
function fmt(n){return n>=1e6?(n/1e6).toFixed(1)+"M":n>=1e3?(n/1e3).toFixed(1)+"k":(+n).toFixed(n<10?2:0)}
function chart(model,ser){
  const W=900,H=190,P=34; if(!ser||ser.length<2)return `<p>${esc(model)}: collecting samples…</p>`;
  const t0=ser[0].t,t1=ser[ser.length-1].t;
  const ymax=Math.max(...ser.map(s=>Math.max(s.incoming,s.admitted,s.limit)))*1.1||1;
  const win=Math.round(ser[ser.length-1].window_seconds||0);
  const x=t=>P+(W-P-5)*(t-t0)/Math.max(1,t1-t0), y=v=>H-18-(H-28)*v/ymax;
  const line=(k,dash)=>`<polyline data-series="${k}" fill="none" stroke="${colors[k]}" stroke-width="2" ${dash?'stroke-dasharray="6 4"':''} points="${ser.map(s=>x(s.t).toFixed(1)+","+y(Math.min(s[k]||0,ymax)).toFixed(1)).join(" ")}"/>`;
  let ticks=""; for(let i=0;i<=4;i++){const v=ymax*i/4;ticks+=`<text x="2" y="${y(v)+4}" font-size="10">${fmt(v)}</text><line x1="${P}" x2="${W}" y1="${y(v)}" y2="${y(v)}" stroke="#eef0f3"/>`}
  return `<div><b>${esc(model)}</b> <span class="legend"><span><i class="sw" style="background:${colors.incoming}"></i>incoming</span><span><i class="sw" style="background:${colors.admitted}"></i>admitted</span><span><i class="sw" style="background:${colors.limit}"></i>limit</span><span title="the limit plus the tokens the bucket had saved ${win}s before: what the limiter lets through (admitted counts a job sent back unused, with its tokens, each time it is admitted)"><i class="sw" style="background:${colors.allowed}"></i>allowed (limit + saved tokens)</span> each point the average over ${win}s · last ${Math.round((t1-t0)/1000)}s</span>
  <svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" data-points="${ser.length}">${ticks}${line("allowed",true)}${line("limit",true)}${line("incoming")}${line("admitted")}</svg></div>`;
}
async function refresh(){
  try{
    const r=await fetch("/api/dashboard"); if(!r.ok)throw new Error(r.status); const d=await r.json();
    document.getElementById("status").textContent=(d.demo?"demo · ":"")+"updated "+new Date(d.now).toLocaleTimeString();
    document.getElementById("flows").innerHTML=(d.models||[]).map(m=>chart(m.name,(d.series||{})[m.name])).join("");
    let h="<tr><th>class</th><th>backlog</th><th>wait p50</th><th>wait p95</th><th>admitted</th><th title='tokens of jobs of this class admitted before older jobs of other classes (priority at work)'>tokens let in before older work</th><th title='tokens of newer jobs of other classes admitted while the oldest job of this class waited'>tokens of newer work let in first</th></tr>";
    for(const c of classes){const s=(d.classes||{})[c]||{};h+=`<tr><td><i class="sw" style="background:${colors[c]}"></i>${c}</td><td>${s.backlog||0}</td><td>${(s.wait_p50_seconds||0).toFixed(2)}s</td><td>${(s.wait_p95_seconds||0).toFixed(2)}s</td><td>${s.admitted_jobs||0}</td><td>${fmt(s.ahead_tokens||0)}</td><td>${fmt(s.behind_tokens||0)}</td></tr>`}
    document.getElementById("classes").innerHTML=h;
    h="<tr><th>queue</th><th>held</th><th>pending</th><th>active</th><th>retry</th><th>archived</th><th>completed</th></tr>";
    for(const q of classes){const s=(d.queues||{})[q]||{};h+=`<tr><td><a href="/monitoring/queues/${q}">${q}</a></td><td>${s.held||0}</td><td>${s.pending||0}</td><td>${s.active||0}</td><td>${s.retry||0}</td><td>${s.archived||0}</td><td>${s.completed||0}</td></tr>`}
    document.getElementById("queues").innerHTML=h;
    const tb={};for(const x of (d.tenants||[])){const k=x.tier+(String(x.tenant).startsWith("key:")?" · gateway key "+x.tenant.slice(4):" · installation "+x.tenant);tb[k]=(tb[k]||0)+x.backlog}
    const tk=Object.keys(tb).sort((a,b)=>tb[b]-tb[a]); const tmax=Math.max(1,...tk.map(k=>tb[k]));
    h="<tr><th>tier · tenant</th><th style='width:50%'>waiting</th><th>jobs</th></tr>";
    for(const k of tk){h+=`<tr><td>${esc(k)}</td><td><div class="bar"><i style="width:${(100*tb[k]/tmax).toFixed(0)}%"></i></div></td><td>${tb[k]}</td></tr>`}
    document.getElementById("tenants").innerHTML=tk.length?h:"<tr><td>no backlog</td></tr>";
    h="<tr><th>PR</th><th>tier</th><th style='width:40%'>progress</th><th>files</th><th>age</th></tr>";
    for(const p of (d.prs||[])){h+=`<tr><td>${p.link?`<a href="${esc(p.link)}">${esc(p.pr)}</a>`:esc(p.pr)}</td><td>${esc(p.tier)}</td><td><div class="bar"><i style="width:${(100*p.progress).toFixed(0)}%"></i></div></td><td>${p.done}/${p.total}</td><td>${p.age_seconds.toFixed(0)}s</td></tr>`}
    document.getElementById("prs").innerHTML=(d.prs||[]).length?h:"<tr><td>none right now</td></tr>";
    h="<tr><th>model</th><th>ok</th><th>429s</th><th>transient</th><th>quota</th><th>failed</th><th>unreadable replies</th><th>available now</th></tr>";
    for(const m of (d.models||[])){const c=(d.calls||{})[m.name]||{};const rl=c.rate_limited||0;h+=`<tr><td>${esc(m.name)}</td><td>${c.ok||0}</td><td class="${rl?"warn":"ok"}">${rl}</td><td>${c.transient||0}</td><td>${c.quota||0}</td><td>${(c.failed||0)+(c.account||0)}</td><td class="${(c.unusable||0)?"warn":"ok"}">${c.unusable||0}</td><td>${fmt(m.available)}</td></tr>`}
    for(const m of (d.models||[])){for(const k of (m.keys||[])){h+=`<tr><td>&nbsp;&nbsp;key ${esc(k.hash)}</td><td colspan="6" class="${k.paused?"warn":"ok"}">${k.paused?"paused: "+esc(k.paused):"serving"}${k.available_input||k.available_output?` · input ${fmt(k.available_input||0)}, output ${fmt(k.available_output||0)}`:""}</td><td>${fmt(k.available)}</td></tr>`}}
    document.getElementById("calls").innerHTML=h;
    const paused=(d.models||[]).filter(m=>m.paused);
    const win=(d.models||[]).filter(m=>m.window_suspected);
    document.getElementById("paused").innerHTML=(paused.length?paused.map(m=>`<span class="warn">${esc(m.name)} paused: ${esc(m.paused)}</span>`).join("<br>"):"<span class='ok'>no model paused</span>")+
      win.map(m=>`<br><span class="warn">${esc(m.name)}: provider looks window-limited; set limiter: window</span>`).join("")+
      (d.models||[]).filter(m=>m.auto_window).map(m=>`<br><span class="ok">${esc(m.name)}: limiter auto counts in a window (the provider's headers showed one)</span>`).join("")+
      (d.models||[]).filter(m=>m.window_margin_ms).map(m=>`<br><span class="ok">${esc(m.name)}: window margin ${m.window_margin_ms.toFixed(1)} ms (each admission counts that much past its window)${m.look_ahead_ms?`; look-ahead ${m.look_ahead_ms.toFixed(0)} ms (admitted that long before its room frees, a job waits for it at its call)`:""}</span>`).join("");
    const gu=d.gave_up||{};const gk=Object.keys(gu).sort();
    document.getElementById("gaveup").innerHTML=gk.length?"jobs that gave up after their retry budget: "+gk.map(k=>`<span class="warn">${esc(k.replace("|"," · "))}: ${gu[k]}</span>`).join(", "):"<span class='ok'>no job gave up</span>";
    h="<tr><th>model</th><th>kind</th><th>👍</th><th>👎</th><th>accepted</th></tr>";
    for(const a of (d.acceptance||[])){h+=`<tr><td>${esc(a.model)}</td><td>${esc(a.kind)}</td><td>${a.up}</td><td>${a.down}</td><td class="${a.up+a.down&&a.rate<0.5?"warn":"ok"}">${a.up+a.down?(100*a.rate).toFixed(0)+"%":"no votes"}</td></tr>`}
    document.getElementById("acceptance").innerHTML=(d.acceptance||[]).length?h:"<tr><td>no votes yet: people's 👍 and 👎 on prq's findings are read at the pull request's next review</td></tr>";
    h="<tr><th>tenant</th><th>tier</th><th style='width:40%'>used</th><th>of</th><th>resets</th></tr>";
    for(const q of (d.quotas||[])){h+=`<tr><td>${esc(q.tenant)}</td><td>${esc(q.tier)}</td><td><div class="bar"><i style="width:${Math.min(100,100*q.used/q.limit).toFixed(0)}%"></i></div></td><td>${fmt(q.limit)}</td><td>${esc(q.reset)}</td></tr>`}
    document.getElementById("quotas").innerHTML=(d.quotas||[]).length?h:"<tr><td>no quota in use by the PRs in progress</td></tr>";
    const usd=x=>"$"+(x<10?x.toFixed(4):x.toFixed(2));const cm=Object.keys(d.costs||{}).sort();
    h="<tr><th>model</th><th>paid</th><th>trial</th><th>free</th><th>all</th></tr>";
    for(const m of cm){const c=d.costs[m];const all=Object.values(c).reduce((a,b)=>a+b,0);h+=`<tr><td>${esc(m)}</td><td>${usd(c.paid||0)}</td><td>${usd(c.trial||0)}</td><td>${usd(c.free||0)}</td><td>${usd(all)}</td></tr>`}
    document.getElementById("costs").innerHTML=cm.length?h:"<tr><td>no priced call yet (models[].prices)</td></tr>";
    h="<tr><th>tenant</th><th>tier</th><th>this month</th><th>of budget</th></tr>";
    for(const s of (d.spend||[])){const b=s.budget?`<span class="${s.share>=0.9?"warn":"ok"}">${(100*s.share).toFixed(0)}% of ${usd(s.budget)}</span>`:"";h+=`<tr><td>${esc(s.tenant)}</td><td>${esc(s.tier||"")}</td><td>${usd(s.dollars)}</td><td>${b}</td></tr>`}
    document.getElementById("spend").innerHTML=(d.spend||[]).length?h:"";
  }catch(e){document.getElementById("status").textContent="cannot reach prq: "+e.message}
}
async function refreshKeys(){
  try{
    const r=await fetch("/api/keys"); if(!r.ok)throw new Error(r.status); const ks=await r.json();
    let h="<tr><th>key</th><th>name</th><th>tier</th><th style='width:30%'>quota used</th><th>of</th><th>per</th><th>this month</th><th>status</th></tr>";
    const bar=(used,of)=>`<div class="bar" style="margin:2px 0"><i style="width:${Math.min(100,100*used/of).toFixed(0)}%"></i></div>`;
    for(const k of ks){const q=k.quota_tokens||0,d=k.quota_dollars||0;
      const used=[q?bar(k.quota_used,q):"",d?bar(k.used_dollars||0,d):""].join("")||"no quota";
      const of=[q?fmt(q)+" tokens":"",d?"$"+d.toFixed(d<10?4:2):""].filter(x=>x).join(" and ");
      h+=`<tr><td>${esc(k.id)}</td><td>${esc(k.name)}</td><td>${esc(k.tier)}</td><td>${used}</td><td>${of}</td><td>${esc(q||d?k.quota_period:"")}</td><td>${"$"+(k.spent_this_month||0).toFixed(4)}</td><td class="${k.revoked?"warn":"ok"}">${k.revoked?"revoked":"active"}</td></tr>`}
    document.getElementById("gwkeys").innerHTML=ks.length?h:"<tr><td>no keys: prq keys create NAME</td></tr>";
  }catch(e){document.getElementById("gwkeys").innerHTML="<tr><td>keys unavailable: "+esc(e.message)+"</td></tr>"}
}
refresh(); setInterval(refresh,2000); refreshKeys(); setInterval(refreshKeys,5000);
