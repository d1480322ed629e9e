"""What Laya knows about words before it sees any example: which ones name software things, and
which ones say what kind of answer is wanted, in the languages users write in most.

A few hundred labelled requests cannot teach that `shader`, `netplan` or `kubectl` are software;
a list can. The cues are read as features next to the n-grams: the model learns how much each
group counts, and how a question form reads with and without software in it ("why does my ...").
Entries are lowercase tokens (`c++`, `c#` and `k8s` stay whole), or several tokens joined by one
space; entries in scripts without spaces between words are matched as substrings.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(w.replace("_", " ") for w in text.split())


# Names of software things: languages, tools, formats, APIs and programming nouns. Common words
# with an everyday meaning (go, class, table, model, branch, shell, string, window) are left out.
TECH = _words("""
    python java javascript typescript js ts rust golang c++ c# csharp cpp ruby php perl lua haskell
    scala elixir erlang clojure kotlin dart matlab fortran cobol sql nosql html html5 css scss sass
    bash zsh powershell vba latex yaml yml json toml xml csv markdown regex regexp glsl hlsl wgsl
    solidity verilog vhdl cuda opencl wasm webassembly jsx tsx asm x86 arm64 llvm gcc clang msvc
    react vue angular svelte nextjs nuxt django flask fastapi laravel symfony rails spring_boot
    node nodejs npm npx yarn pnpm pip pipx conda virtualenv venv maven gradle webpack vite babel
    eslint prettier jest pytest junit mocha cypress selenium playwright pandas numpy scipy sklearn
    scikit tensorflow pytorch torch keras jax matplotlib seaborn plotly xgboost lightgbm opencv
    unity godot pygame webgl opengl vulkan directx swiftui uikit jetpack flutter xamarin electron
    tauri tkinter jquery tailwind redux graphql grpc protobuf restful oauth jwt openapi swagger
    prisma sequelize mongoose sqlalchemy hibernate orm typeorm celery kafka rabbitmq redis postgres
    postgresql mysql sqlite mongodb mongo mariadb cassandra dynamodb elasticsearch bigquery dbt
    airflow hadoop kubernetes k8s kubectl helm docker dockerfile podman terraform ansible nginx
    haproxy systemd systemctl cron crontab aws s3 ec2 ecs eks gcp azure heroku vercel netlify git
    github gitlab bitbucket svn vim neovim emacs vscode intellij xcode linux ubuntu debian fedora
    centos unix macos wsl android ios arduino esp32 esp8266 gpio micropython platformio mqtt ssh
    sftp http https tcp udp dns dhcp ipv4 ipv6 wireguard openvpn iptables nmap curl wget grep sed
    awk jq ffmpeg imagemagick chmod chown sudo apt brew homebrew rsync tar journalctl netplan
    vlookup xlookup hlookup macro macros autohotkey snakemake slurm mpi openmp numba jupyter
    notebook_kernel ide sdk cli api apis endpoint endpoints webhook webhooks backend frontend
    localhost server servers serverless microservice microservices websocket websockets socket
    sockets proxy cors csrf xss jwt ssl tls openssl cookie cookies url urls uri dom div navbar
    flexbox usestate useeffect props component components plugin plugins middleware framework
    function functions method methods variable variables array arrays integer integers boolean
    struct structs enum enums pointer pointers null nullptr undefined nan exception exceptions
    traceback stacktrace segfault segmentation_fault compile compiler compiles compiling compiled
    runtime debug debugger debugging bug bugs refactor repo repository commit commits deploy
    deployed deployment script scripts code coding programming programmer algorithm algorithms
    query queries database databases schema schemas cache caching thread threads threading mutex
    deadlock async await callback callbacks closure lambda unicode utf encoding parse parser
    parsing serialize deserialize config configuration env shader shaders vertex framebuffer
    sprite sprites rendering gpu cpu kernel binary bytes dataframe dataframes unittest mock linter
    lint dependency dependencies module modules import widget widgets webpage
    terminal command_line commandline shell_script hello_world
    browser firefox chrome_extension ajax axios fetch_api stdout stderr stdin argv regex_pattern
    subprocess coroutine coroutines goroutine goroutines iterator generator decorator recursion
    recursive hashmap dict dictionary tuple tuples vector vectors typescript_types generics
    namespace namespaces interface compile_error syntax_error typeerror valueerror keyerror
    nullpointerexception indexerror unicodedecodeerror modulenotfounderror oom crashloopbackoff
    imagepullbackoff pod pods replica replicas ingress namespace yaml_file cronjob lambda_function
    orm_query index_scan seq_scan n+1 gitignore readme makefile cmake bazel ci cd_pipeline
    gh_actions github_actions pull_request merge_conflict rebase stash cherry-pick
    loop loops for_loop while_loop if_statement if_else switch_statement data_frame hostname
    ping ip_address subnet netmask buffer_overflow exploit memory_leak leaking_memory leaks_memory
    spark pyspark parquet avro hive presto trino flink beam dplyr tidyr ggplot ggplot2 rstudio
    tidyverse shiny stata spss sas scratch_project blockly jupyterlab colab anaconda spyder pycharm
    webstorm android_studio sublime notepad++ gdb valgrind strace perf lldb profiler profiling
    benchmark benchmarks latency throughput timeout timeouts retry retries rate_limit
    load_balancer reverse_proxy ssl_certificate dns_record cname mx_record subdomain localhost
    sqlserver oracle_db tsql plsql pgadmin phpmyadmin supabase firebase firestore appwrite
    cloudflare lambda_function cloudwatch datadog grafana prometheus kibana logstash splunk sentry
    oauth2 saml ldap kerberos active_directory powershell_script batch_file bat cmd exe dll
    apk ipa gradle_build cocoapods npm_package pypi crate crates rustc cargo_build go_mod
    goroutine channel_in_go mutexes semaphore race_condition concurrency multithreading
    multiprocessing asyncio event_loop callback_hell promise_chain unhandled_promise
    null_pointer off-by-one regex_match substring char chars utf-8 ascii hexadecimal bitwise
    bitmask int long_int boolean_flag typedef malloc free() realloc segfaults
    heap stack_overflow stack_trace garbage_collector gc jvm clr dotnet .net aspnet blazor
    wpf winforms unity3d unreal_engine blueprint_script gdscript shadergraph depth_buffer
    framebuffer_object vao vbo uniform uniforms texture_atlas mipmap mipmaps particle_system
    raycast collider rigidbody navmesh tilemap spritesheet game_loop delta_time physics_engine
    render_loop draw_call draw_calls frame_rate fps_drop vsync
    html_form input_field onclick onchange event_listener addeventlistener queryselector
    innerhtml localstorage sessionstorage indexeddb service_worker pwa spa ssr hydration
    webpack_config babel_config tsconfig package.json requirements.txt pyproject setup.py
    env_file dotenv environment_variable environment_variables path_variable
    tokenizer tokenizers embedding embeddings fine-tuning fine-tune finetune finetuning
    hugging_face epoch epochs batch_size learning_rate optimizer gradient gradients dataloader
    tensor tensors onnx gguf llama.cpp vllm lora qlora quantization quantize inference
    my_app our_app the_app my_website our_website my_site my_program our_program my_script
    my_code our_code my_server our_server my_api our_api my_query my_function my_bot my_game
    my_page my_build our_build our_pipeline my_container my_cluster
    base_de_datos banco_de_dados base_de_données datenbank datenbankmodell banca_dati
    baza_danych база_данных veritabanı
    qgis arcgis shapefile geojson gdal postgis crs fpga verilog vivado quartus kicad eagle_pcb
    footprint_library pcb firmware bootloader uart spi i2c can_bus jtag obs_studio obs_encoder
    nvenc x264 h264 h265 hevc codec codecs bitrate home_assistant zigbee2mqtt node-red nodered
    homebridge esphome tasmota openhab blueprint_cast unreal_blueprint blender_python bpy
    maya_python houdini vex ros ros2 gazebo urdf solidworks_macro autolisp autocad_script
    revit_api dynamo_script grasshopper rhino_script arduino_ide teensy stm32 avr atmega pico
    circuitpython raspbian raspberry_pi pi-hole pihole nextcloud jellyfin plex_server
    unraid truenas proxmox esxi vmware virtualbox hyper-v qemu kvm lxc vagrant packer consul
    vault nomad istio linkerd envoy traefik caddy certbot letsencrypt lets_encrypt
    wordpress woocommerce shopify_liquid liquid_template drupal joomla magento squarespace_css
    wix_velo webflow_embed php_artisan composer_json artisan blade_template twig jinja jinja2
    handlebars ejs pug mustache_template htmx alpinejs alpine.js stimulus turbo hotwire
    dark_mode toggle_button input_value button_click onclick_handler event_handler state_update
    re-render rerender re-renders rerenders render_twice hydration_error props_drilling
    usememo usecallback useref usecontext zustand mobx pinia vuex ngrx rxjs observable
    observables signal_handler sigterm sigkill sigsegv core_dump coredump exit_code
    return_value returns_none returns_undefined null_value nan_values dtype dtypes numpy_array
    pandas_dataframe csv_file json_file yaml_file xml_file log_file logs logging logger
    stack_trace traceback_error syntaxerror referenceerror attributeerror importerror
    oserror permissionerror filenotfounderror connectionerror timeouterror runtimeerror
    outofmemoryerror stackoverflowerror classnotfoundexception illegalargumentexception
    concurrentmodificationexception panic panics unwrap borrow_checker lifetime_error
    cmakelists linker linking undefined_reference header_file headers include_path libc glibc
    musl static_linking dynamic_linking shared_library so_file dylib symbol_table
""") | _words(  # apps, office tools and "settings", "program", "server" in other languages; a few
    # product names that are everyday words too (Outlook, SAP) are kept, the model weighs them
    """
    software app apps excel spreadsheet spreadsheets google_sheets libreoffice
    powerpoint outlook onedrive sharepoint office_365 microsoft_365 power_bi powerbi dax
    power_query tableau looker salesforce hubspot sap successfactors quickbooks xero 1c zapier
    airtable jira confluence lightroom photoshop premiere_pro davinci_resolve after_effects figma
    autocad etabs revit sketchup solidworks fusion_360 obs twitch_bot discord_bot
    программа программы программе приложение приложения приложении настройки настройках
    настройка эксель экселе сервер сервера сервере линукс виндовс бэкап драйвер драйвера софт
    програма програми програмі застосунок застосунку додаток налаштування сервері
    برنامج البرنامج تطبيق التطبيق اعدادات إعدادات الاعدادات الإعدادات اكسل الاكسل الإكسل إكسل
    شيت الشيت كود الكود سيرفر السيرفر
    برنامه نرم_افزار تنظیمات اکسل کد سرور اتوکد
    एक्सेल सॉफ्टवेयर ऐप सेटिंग सेटिंग्स कोड सर्वर प्रोग्राम टैली tally
    uygulama uygulaması uygulamada ayarlar ayarları ayarlarda programı programda sunucu sunucuda
    kodu yazılım yazılımı
    aplikasi pengaturan perangkat_lunak
    ứng_dụng phần_mềm cài_đặt máy_chủ
    aplikacja aplikacji aplikację ustawienia ustawieniach programie serwer serwerze oprogramowanie
    einstellungen anwendung programm programms
    aplicación aplicacion aplicativo applicazione configuración configuracion configurações
    configuracoes configurazione impostazioni ajustes paramètres logiciel servidor serveur
    hoja_de_cálculo hoja_de_calculo planilha foglio_di_calcolo tableur
""")

# Words that ask for code or a formal artifact.
CODE_ASK = _words("""
    snippet one-liner oneliner implement implementation refactor regex command commands formula
    formulas macro function script query schema config dockerfile manifest yaml endpoint
    write_a_function write_a_script write_code write_a_program write_a_query sample_code
    show_code in_code example_code create_a_table unit_test unit_tests test_case what_does
    how_do_i_fix error_message stack_trace create_a_model make_a_model model_for_a data_model
    create_a_schema schema_for sketch_for sketch_that er_model a_program make_a_program program_that
    a_tool make_a_tool little_tool a_bot make_a_bot bot build_a_website make_a_website a_website
    make_a_page page_that a_script write_something make_something something_that automate
    automatically make_a_spreadsheet spreadsheet_that an_app make_an_app app_that an_extension
    código codigo función funcion consulta comando fonction requête requete commande funktion
    befehl abfrage skript codice funzione função funcao kod funkcja zapytanie polecenie код
    esquema fórmula formule formel schéma schema_di
    функция функцию запрос скрипт команда fonksiyon sorgu komut functie opdracht
    формула формулы формулу формули معادلة معادله المعادلة المعادله فرمول फॉर्मूला formül formülü
    rumus công_thức formuła formułę formuły
""")

# Words that ask for several paragraphs of natural language.
PROSE_ASK = _words("""
    explain explanation describe discuss essay story stories poem sonnet letter speech toast
    eulogy article blog history overview compare comparison advice tips guide plan itinerary
    routine strategy pros cons benefits risks advantages disadvantages impact effects causes
    consequences role importance significance philosophy ethics beginner learn improve prepare
    ideas feedback opinion motivational novel chapter paragraph paragraphs detail detailed
    in_depth step_by_step makes_a_good make_a_good how_do_i_start how_to_start how_can_i_start
    how_should_i how_do_i_become the_role what_happens tell_me_about walk_me_through
    shopping_list grocery_list packing_list checklist timeline menu lesson description
    announcement teach teaching is_it_worth worth_it honest_picture should_i should_we
    think_through decide decision career worth_learning balanced_view your_view system_design
    not_code without_code
    no_code rather_than_code without_commands in_plain_words in_plain_language plain_english
    non_technical conceptually in_general_terms high_level eli5 like_i_m_five
    qui_fait_un_bon qui_fait_une_bonne hace_que_un_buen hace_que_una_buena faz_uma_boa
    faz_um_bom rende_buona rende_un_buon macht_eine_gute macht_einen_guten macht_ein_gutes
    maakt_een_goede gör_en_bra cómo_empiezo cómo_empezar cómo_comenzar comment_commencer
    comment_débuter wie_fange_ich wie_beginne_ich wie_starte_ich come_iniziare come_comincio
    como_começo como_começar hoe_begin_ik hoe_start_ik hur_börjar_jag jak_zacząć как_начать
    nasıl_başlarım
    explica explícame explicame explicar explique explícanos describe descríbeme historia cuento
    carta ensayo poema papel consejos empiezo empezar comenzar explique-moi décris raconte
    histoire poème lettre essai rédige rôle conseils commencer erkläre erklären beschreibe
    geschichte gedicht brief aufsatz rede rolle vergleiche plane spiega spiegami descrivi storia
    poesia lettera ruolo racconta iniziare descreva história historia poema papel começo começar
    leg_uit waarom geschiedenis wyjaśnij opisz dlaczego zacząć объясни расскажи опиши почему
    история рассказ açıkla anlat neden förklara varför berätta
""")

# Words that ask for a word, a number or one sentence.
SHORT_ASK = _words("""
    capital population translate translation synonym antonym opposite define definition spell
    spelling abbreviation acronym stand_for plural tense rhymes rhyme convert how_many how_much
    how_old how_tall how_far how_long how_often how_deep how_big what_year which_year when_did
    when_was who_is who_was who_wrote who_invented who_painted who_won who_created who_founded
    yes_or_no one_word one_sentence in_one_sentence in_one_word just_the_number just_tell_me
    one_line a_title a_name tagline slogan subject_line six_word fix_the_grammar this_sentence
    correct_the_spelling what_age at_what_age what_temperature what_time what_day what_date
    what_colour what_color what_size what_percentage what_voltage which_side which_country
    which_city which_planet which_language which_company which_port which_version which_one
    what_port what_version status_code which_key what_key keyboard_shortcut shortcut
    which_setting do_i_need when_should how_deep what_instrument which_instrument
    hello hi hey thanks thank bye goodbye ok okay lol thx good_morning good_evening good_night
    good_afternoon how_are_you joke flip_a_coin never_mind nevermind what_s_up sup cheers
    capitale hauptstadt hoofdstad stolica столица başkent başkenti huvudstad cuántos cuántas
    cuánto combien wie_viele wieviel quanti quante quanto quantos quantas hoeveel ile сколько kaç
    quién wer chi quem кто kim cuándo quand wann quando wanneer kiedy когда traduce traduis
    übersetze traduci traduza vertaal przetłumacz переведи çevir gracias merci danke grazie
    obrigado obrigada bedankt dziękuję спасибо teşekkürler hola bonjour salut hallo ciao olá
    cześć привет merhaba hej tack
""")

# Words of things going wrong: with software in the request a diagnosis of code or config is
# wanted, without it advice.
FAULT = _words("""
    crash crashes crashing crashed hang hangs hanging hung freeze freezes freezing frozen fail
    fails failing failed error errors broken doesn_t_work not_working won_t keeps stops stopped
    throws returns leak leaks leaking slow slower lag lags lagging flicker flickers flickering
    glitch glitches drops dropping timeout stuck deadlock corrupt corrupted wrong weird
    undefined blank missing disappears disappear loses lost twice duplicate duplicates
""")

# "Why": with software in the request it asks for a diagnosis (code), without it for an
# explanation (prose); the model learns that from the pair.
WHY = _words("""
    why por_qué porque pourquoi warum wieso weshalb perché por_que waarom varför dlaczego почему
    neden
""")

# Software things in scripts without spaces (substrings of the text): settings, apps, software,
# spreadsheets and their cells and formulas, servers, errors, installing and updating.
CJK_TECH = ("设置", "設定", "应用程序", "應用程式", "软件", "軟體", "軟件", "单元格", "儲存格", "服务器",
            "伺服器", "报错", "報錯", "插件", "アプリ", "エクセル", "数式", "エラー", "サーバー",
            "インストール", "アップデート", "スプレッドシート", "설정", "앱", "엑셀", "수식", "오류", "에러",
            "서버", "프로그램", "설치", "업데이트", "소프트웨어", "แอป", "ตั้งค่า", "โปรแกรม",
            "เซิร์ฟเวอร์")

# Scripts without spaces: substrings of the text.
CJK = {
    "code": ("代码", "函数", "程序", "脚本", "命令", "查询", "数据库", "コード", "関数", "プログラム",
             "コマンド", "스크립트", "코드", "함수"),
    "prose": ("解释", "说明", "描述", "介绍", "为什么", "如何", "怎样", "历史", "短文", "文章", "故事",
              "角色", "作用", "详细", "説明", "教えて", "なぜ", "歴史", "について", "計画", "どういう",
              "어떻게", "설명", "왜", "कैसे", "क्यों", "اشرح", "لماذا", "دور"),
    "short": ("首都", "多少", "几", "谁", "哪年", "翻译", "谢谢", "你好", "いくつ", "誰", "何年", "翻訳",
              "ありがとう", "こんにちは", "おはよう", "몇", "누구", "어디", "번역", "감사", "안녕",
              "राजधानी", "कितने", "كم"),
}
